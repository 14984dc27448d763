//! Output of the command line: lines to stdout that stop quietly when the
//! reader goes away (`blox sim | head -1`), and the log setup.

use std::io::{IsTerminal, Write};

/// Writes one line to stdout. A closed pipe is reported as
/// [`std::io::ErrorKind::BrokenPipe`], which [`crate::main`] turns into a
/// quiet exit.
pub fn line(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// `say!("...", args)`: a line to stdout; `?`-able.
#[macro_export]
#[doc(hidden)]
macro_rules! say {
    ($($t:tt)*) => {
        $crate::out::line(format_args!($($t)*))
    };
}

/// Logs to stderr through `tracing`: `filter` (`warn`, `info`,
/// `blox_core=debug`, …) unless `RUST_LOG` is set; plain text (no colour
/// codes) when stderr is not a terminal. A second call keeps the first setup.
/// The L-BFGS-B routine's own progress notes (`lbfgsbrs`: "more than 10
/// function and gradient evaluations in the last line search", which the
/// Fortran original prints and scipy hides) are off unless `RUST_LOG` asks.
pub fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{filter},lbfgsbrs=off")));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// True if `e` (or what caused it) is a closed pipe on stdout.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// An error with its causes, `: `-separated, each message once (a cause
/// whose text the message already ends with is not repeated).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for c in e.chain() {
        let m = c.to_string();
        if out.is_empty() {
            out = m;
        } else if !out.contains(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
    }
    out
}
