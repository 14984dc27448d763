//! The whole `blox` command line, with this crate's policies linked in.
use custom_policy as _;
fn main() -> std::process::ExitCode {
    blox::main()
}
