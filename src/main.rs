//! `blox`: the command line (all of it is in the library; see `blox::main`).

fn main() -> std::process::ExitCode {
    blox::main()
}
