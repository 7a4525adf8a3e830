//! The one corridor between slurmd and its slurmstepds: how a step learns its figure from
//! the ledger slurmd keeps. Both ends are here, and only here: slurmd's [`Publisher`] and
//! the step's [`Client`].
//!
//! Four channels, each for a moment of a step's life, the cheapest that serves it:
//! - **slots** ([`slots`]): a file of fixed-size records, one per step, rewritten in place
//!   at each of slurmd's updates; Slurm's periodic polls read their step's record there,
//!   without a word to slurmd.
//! - **questions** ([`ask`]): a line on a stream socket, answered from slurmd's memory, for
//!   a step's edges (its first and last figure) and sstat's reads; the answer holds the
//!   asking step's account and the node's, never another step's.
//! - **the doorbell** ([`doorbell`]): a datagram that asks for a fresh update, from a step
//!   whose slurmd does not take questions.
//! - **the ledger file** ([`writer`]): the whole ledger, written at each update; what a
//!   step reads while slurmd does not answer, what slurmd continues from, what senergy reads.
//!
//! # Versions
//!
//! A step's slurmstepd keeps the plugin it loaded when the step began, and slurmd is
//! restarted after its package is upgraded, not with it: while a node is upgraded a slurmd
//! of one release serves steps of another, either way round. So the exchange has a version,
//! as Slurm's RPCs do (`SLURM_PROTOCOL_VERSION`, `SLURM_ONE_BACK_PROTOCOL_VERSION`,
//! `SLURM_MIN_PROTOCOL_VERSION`):
//! - **1**: the doorbell's ring and the ledger file (the first releases).
//! - **2**: questions on the socket, `ask <step> <want>`, and the slots file.
//! - **3** ([`PROTOCOL_VERSION`]): a question names its version, `ask<N> <step> <want>`.
//!
//! The window is this version and the two before it ([`MIN_PROTOCOL_VERSION`]), as
//! Slurm's: slurmd answers a question of any version in it, in the form it was asked;
//! a step asks in its own version, then one back where slurmd dropped the question unread
//! ([`ONE_BACK_PROTOCOL_VERSION`]), in that one from then on if it was answered, and rings
//! and reads the file where nobody listens. A
//! version outside the window is refused, never guessed at.
//!
//! **Retiring version 1**: the release that brings version 4 raises the minimum to 2; then
//! slurmd no longer counts a bare ring as a step's ask (the doorbell takes questions only),
//! and a step whose slurmd does not listen reads the file without ringing (a slurmd
//! starting again; no slurmd of that age is left on a node that ran version 2 or later).

pub(crate) mod ask;
mod client;
pub(crate) mod doorbell;
mod publisher;
pub(crate) mod slots;
mod writer;

pub(crate) use client::{Client, Fetched};
pub(crate) use publisher::Publisher;
pub(crate) use writer::Sink;

/// This release's version of the exchange.
pub(crate) const PROTOCOL_VERSION: u16 = 3;
/// The version before it: what a step asks in where slurmd dropped its question unread.
pub(crate) const ONE_BACK_PROTOCOL_VERSION: u16 = 2;
/// The oldest version slurmd still serves: two before this one, as Slurm's window.
pub(crate) const MIN_PROTOCOL_VERSION: u16 = PROTOCOL_VERSION - 2;
