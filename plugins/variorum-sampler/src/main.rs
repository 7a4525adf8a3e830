//! `acct_gather_energy_rust_variorum_sampler`: calls LLNL Variorum for
//! `acct_gather_energy/rust_variorum`, in a process of its own.
//!
//! Variorum may `exit()`, crash, hang or print to stdout, and is not thread-safe, so slurmd
//! never loads it: the plugin starts this program and reads one line per sample from a
//! pipe. The command line and the lines are `slurm_energy_logic::variorum::protocol`, shared
//! with the plugin. Here: the sampling loop; in [`sys`], what calls C: isolation from
//! slurmd, capture of what the library prints, the library's API per Variorum release.
//!
//! The sampler exits when its parent dies (`PR_SET_PDEATHSIG` = SIGKILL, plus a check of
//! `getppid()` each period) and when writing to the pipe fails (the reader is gone).

// The unsafe code is in the modules that call C: the loop only calls them.
#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod sys;

use std::fs::File;
use std::io::Write;
use std::process::ExitCode;

use slurm_energy_logic::variorum::protocol::{Invocation, Line, WARMUP, monotonic_ns};

use sys::capture::Capture;
use sys::isolation::{self, quit};
use sys::library;

/// The pipe to the plugin.
struct Results(File);

impl Results {
    /// One line per write, so the reader never sees half a line from us: the pipe is
    /// ours alone, and lines are far below the pipe's capacity.
    fn send(&mut self, line: &Line) -> std::io::Result<()> {
        self.0.write_all(line.encode().as_bytes())
    }

    /// Reports why the sampler cannot go on, and leaves.
    fn fail(&mut self, error: String) -> ! {
        let _ = self.send(&Line::Failed(error));
        quit(1)
    }
}

fn main() -> ExitCode {
    isolation::die_with_parent();
    let args = match Invocation::parse(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            let line = Line::Failed(format!("sampler: {e}")).encode();
            let _ = std::io::stdout().write_all(line.as_bytes());
            return ExitCode::from(2);
        }
    };
    if isolation::parent_gone(args.parent) {
        return ExitCode::SUCCESS;
    }
    isolation::no_core_files();
    let mut out = match isolation::take_result_pipe(args.result_fd) {
        Ok(pipe) => Results(pipe),
        Err(_) => return ExitCode::from(2),
    };
    let mut capture = match Capture::install() {
        Ok(capture) => capture,
        Err(e) => out.fail(format!("sampler: cannot redirect stdout: {e}")),
    };
    sample(&args, &mut out, &mut capture)
}

/// Loads Variorum, reports that it answers, then sends a sample every period until the
/// reader or the parent is gone.
fn sample(args: &Invocation, out: &mut Results, capture: &mut Capture) -> ! {
    capture.reset();
    let lib = match library::load(&args.library) {
        Ok(lib) => lib,
        Err(e) => {
            let tail = capture.tail();
            out.fail(format!("cannot load {}: {e}{tail}", args.library))
        }
    };
    let (api, version) = match library::detect(lib) {
        Ok(found) => found,
        Err(e) => out.fail(format!("{}: {e}", args.library)),
    };

    // The warm-up call: its result is discarded (see WARMUP), its failure is not.
    capture.reset();
    if let Err(e) = api.call() {
        let tail = capture.tail();
        out.fail(format!("{e}{tail}"));
    }
    let ready = Line::Ready {
        api: api.generation().to_string(),
        version,
    };
    if out.send(&ready).is_err() {
        quit(0);
    }
    std::thread::sleep(WARMUP);

    loop {
        capture.reset();
        let line = match api.call() {
            // when the power was read: the plugin integrates with the sample's time, not
            // the time it read the line
            Ok(json) => Line::Sample {
                json,
                t_ns: monotonic_ns(),
            },
            Err(e) => Line::Failed(format!("{e}{}", capture.tail())),
        };
        // The reader is gone: nothing to sample for.
        if out.send(&line).is_err() || isolation::parent_gone(args.parent) {
            quit(0);
        }
        std::thread::sleep(args.period);
        if isolation::parent_gone(args.parent) {
            quit(0);
        }
    }
}
