//! The sampler's calls to C, and the `unsafe` they need, each block with its `// SAFETY:`:
//! [`isolation`] from slurmd, [`capture`] of what the library prints, the [`library`]'s
//! API per Variorum release. The sampling loop (`main.rs`) only calls them.

pub mod capture;
pub mod isolation;
pub mod library;
