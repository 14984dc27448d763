//! Loopback ports for processes that are told their port before they bind
//! it (a soak's scheduler and workers, a test's worker behind a proxy).
//!
//! Binding port 0, reading the port and closing the socket leaves a window
//! in which the kernel hands the same port to the next bind to port 0 or to
//! an outgoing connection's source — a proxy, a client, another worker — and
//! the child then fails with "address in use". A [`PortReservation`] closes
//! that window twice over: it holds the port bound until the caller releases
//! it just before starting the child, and it picks the port outside the
//! kernel's ephemeral range, which neither binds to port 0 nor outgoing
//! connections draw from, so a port stays free while its process restarts.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};

/// A loopback port held bound until [`PortReservation::release`].
#[derive(Debug)]
pub struct PortReservation {
    addr: SocketAddr,
    held: Option<TcpListener>,
}

impl PortReservation {
    /// The reserved address (127.0.0.1 and the port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Lets the port go, for the process about to bind it; returns it.
    pub fn release(&mut self) -> SocketAddr {
        self.held = None;
        self.addr
    }
}

/// The kernel's ephemeral port range (Linux), or the IANA default.
fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|n| n.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((49152, 65535))
}

/// Ports to try: below the ephemeral range (from 10000), else above it.
fn candidate_range() -> Option<(u16, u16)> {
    let (lo, hi) = ephemeral_range();
    if lo > 11_000 {
        Some((10_000, lo - 1))
    } else if hi < 64_535 {
        Some((hi + 1, 65_535))
    } else {
        None
    }
}

/// Reserves a free loopback port outside the ephemeral range (see the
/// module text); where that range leaves no room, any free port.
pub fn reserve_port() -> std::io::Result<PortReservation> {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    if let Some((lo, hi)) = candidate_range() {
        let span = u64::from(hi - lo) + 1;
        // A start that differs between calls and between processes, so
        // concurrent test binaries rarely probe the same ports.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() as u64)
            .unwrap_or(0);
        let mix = (u64::from(std::process::id()) << 20)
            ^ nanos
            ^ CALLS.fetch_add(1, Ordering::Relaxed).wrapping_mul(7919);
        let start = mix.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1;
        for i in 0..span.min(2_000) {
            let port = lo + ((start.wrapping_add(i)) % span) as u16;
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            if let Ok(l) = TcpListener::bind(addr) {
                return Ok(PortReservation {
                    addr,
                    held: Some(l),
                });
            }
        }
    }
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(PortReservation {
        addr: l.local_addr()?,
        held: Some(l),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_distinct_held_and_outside_the_ephemeral_range() {
        let (lo, hi) = ephemeral_range();
        let mut held: Vec<PortReservation> = (0..64).map(|_| reserve_port().unwrap()).collect();
        let mut ports: Vec<u16> = held.iter().map(|r| r.addr().port()).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 64);
        if candidate_range().is_some() {
            assert!(ports.iter().all(|&p| p < lo || p > hi), "{ports:?}");
        }
        // Held: nobody else can bind it; released: the child can.
        let a = held[0].addr();
        assert!(TcpListener::bind(a).is_err());
        held[0].release();
        TcpListener::bind(a).unwrap();
    }
}
