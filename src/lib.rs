//! # blox
//!
//! The `blox` command line as a library: [`main`] runs every subcommand
//! (`sim`, `sweep`, `report`, `local`, `scheduler`, `worker`, `submit`,
//! `status`, `cancel`, `policies`, `bench`), with argument parsing, logging
//! and the exit status, for whatever policies are linked into the calling
//! binary. The built-in ones (`blox-policies`) always are; a policy crate of
//! your own is linked by naming it, so a runner is three lines:
//!
//! ```ignore
//! use my_policy as _;
//! fn main() -> std::process::ExitCode { blox::main() }
//! ```
//!
//! The logic behind each command lives in the libraries ([`blox_sim`]'s
//! simulation, sweeps, reports and benchmarks; [`blox_runtime`]'s scheduler,
//! worker, local backend and client helpers); [`commands`] holds the thin
//! layer that reads arguments and prints.

pub mod cli;
pub mod commands;
#[doc(hidden)]
#[doc(hidden)]
pub mod out;

use clap::Parser;
use std::ffi::OsString;
use std::process::ExitCode;

// The built-in policies register themselves by name; naming the crate links
// them into every binary that uses this library.
use blox_policies as _;

/// Runs the command line on this process's arguments and returns its exit
/// status (0: success; 1: an error, printed once to stderr; 2: a usage error).
pub fn main() -> ExitCode {
    run(std::env::args_os())
}

/// Runs the command line on `args` (the first is the program name).
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match cli::Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // --help and --version print to stdout and succeed.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    out::init_logging(&cli.log);
    match commands::dispatch(cli.command) {
        Ok(code) => code,
        Err(e) if out::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", out::error_text(&e));
            ExitCode::FAILURE
        }
    }
}
