//! Budgets for the connections a gRPC endpoint (the scheduler's, a
//! worker's) accepts, so that clients that open connections and never
//! speak cannot use up its descriptors and starve the heartbeats:
//!
//! - a connection must carry a call that passes the endpoint's
//!   authentication (its interceptor calls [`authenticated`]) within
//!   [`ConnLimits::handshake`], or it is closed: a client that connects
//!   and says nothing, or only the HTTP/2 preface, or only part of a TLS
//!   handshake, or calls without a valid token, holds nothing long;
//! - at most [`ConnLimits::max_pending`] connections may be in that state
//!   at once: a new one pushes the oldest out (so a client that completes
//!   its handshake in time gets in however many idle ones are opened);
//! - at most [`ConnLimits::max_open`] connections in all: beyond, a new one
//!   is closed at once (counted, and logged once a minute);
//! - an established connection that stops answering is closed by HTTP/2
//!   keepalive ([`KEEPALIVE_INTERVAL`], [`KEEPALIVE_TIMEOUT`]).
//!
//! Workers keep one long-lived connection each, established long before
//! any flood, so their heartbeats go on whatever is opened meanwhile.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How often the server pings an idle HTTP/2 connection, and how long it
/// waits for the answer before closing it.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The budgets (module docs).
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    pub max_open: usize,
    pub max_pending: usize,
    pub handshake: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_open: 4096,
            max_pending: 256,
            handshake: Duration::from_secs(10),
        }
    }
}

/// What one connection shares with the registry.
#[derive(Default)]
struct Slot {
    established: AtomicBool,
    evicted: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Slot {
    fn evict(&self) {
        self.evicted.store(true, Ordering::Release);
        if let Some(w) = self.waker.lock().unwrap_or_else(|e| e.into_inner()).take() {
            w.wake();
        }
    }
}

/// The connections an endpoint holds.
#[derive(Default)]
pub struct Registry {
    open: AtomicUsize,
    pending: Mutex<VecDeque<Weak<Slot>>>,
    /// Connections closed at once (over `max_open`), pushed out while
    /// pending, and timed out in their handshake.
    pub refused: AtomicU64,
    pub evicted: AtomicU64,
    pub timed_out: AtomicU64,
    last_warning: Mutex<Option<std::time::Instant>>,
}

impl Registry {
    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    fn warn(&self, what: &str) {
        let mut last = self.last_warning.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
            *last = Some(std::time::Instant::now());
            tracing::warn!(
                open = self.open(),
                refused = self.refused.load(Ordering::Relaxed),
                evicted = self.evicted.load(Ordering::Relaxed),
                timed_out = self.timed_out.load(Ordering::Relaxed),
                "{what} (logged once a minute)"
            );
        }
    }

    /// Takes `io` (from `peer`: local and remote address) in, or refuses
    /// it (`None`: the caller drops it).
    fn admit<T>(
        self: &Arc<Self>,
        io: T,
        peer: Option<(SocketAddr, SocketAddr)>,
        limits: &ConnLimits,
    ) -> Option<Guarded<T>> {
        if self.open.fetch_add(1, Ordering::AcqRel) >= limits.max_open {
            self.open.fetch_sub(1, Ordering::AcqRel);
            self.refused.fetch_add(1, Ordering::Relaxed);
            self.warn("too many connections: new ones are closed at once");
            return None;
        }
        let slot = Arc::new(Slot::default());
        {
            let mut q = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            q.retain(|w| {
                w.upgrade()
                    .is_some_and(|s| !s.established.load(Ordering::Acquire))
            });
            while q.len() >= limits.max_pending.max(1) {
                if let Some(old) = q.pop_front().and_then(|w| w.upgrade()) {
                    old.evict();
                    self.evicted.fetch_add(1, Ordering::Relaxed);
                }
            }
            q.push_back(Arc::downgrade(&slot));
        }
        if self.evicted.load(Ordering::Relaxed) > 0 {
            self.warn("many connections that send nothing: the oldest are closed");
        }
        if let Some(k) = peer {
            by_peer().insert(k, Arc::downgrade(&slot));
        }
        Some(Guarded {
            io,
            slot,
            registry: self.clone(),
            deadline: Box::pin(tokio::time::sleep(limits.handshake)),
            peer,
        })
    }
}

/// A connection under the budgets.
pub struct Guarded<T> {
    io: T,
    slot: Arc<Slot>,
    registry: Arc<Registry>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    peer: Option<(SocketAddr, SocketAddr)>,
}

impl<T> Drop for Guarded<T> {
    fn drop(&mut self) {
        self.registry.open.fetch_sub(1, Ordering::AcqRel);
        if let Some(k) = self.peer {
            by_peer().remove(&k);
        }
    }
}

type Peers = HashMap<(SocketAddr, SocketAddr), Weak<Slot>>;

/// Every guarded TCP connection of this process, by (local, remote)
/// address: how an interceptor finds the connection a call came on.
fn by_peer() -> std::sync::MutexGuard<'static, Peers> {
    static PEERS: OnceLock<Mutex<Peers>> = OnceLock::new();
    PEERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Marks the connection `req` came on as established: it carried a call
/// the endpoint's authentication let through (module docs).
pub fn authenticated<T>(req: &tonic::Request<T>) {
    let (Some(local), Some(remote)) = (req.local_addr(), req.remote_addr()) else {
        return;
    };
    if let Some(slot) = by_peer().get(&(local, remote)).and_then(Weak::upgrade) {
        slot.established.store(true, Ordering::Release);
    }
}

impl<T> Guarded<T> {
    fn check(&mut self, cx: &mut Context<'_>) -> std::io::Result<()> {
        if self.slot.evicted.load(Ordering::Acquire) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "pushed out by newer connections before it sent anything",
            ));
        }
        if !self.slot.established.load(Ordering::Acquire) {
            if self.deadline.as_mut().poll(cx).is_ready() {
                self.registry.timed_out.fetch_add(1, Ordering::Relaxed);
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no authenticated call within the deadline",
                ));
            }
            *self.slot.waker.lock().unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
        }
        Ok(())
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.slot.evicted.load(Ordering::Acquire) {
            return Poll::Ready(Err(std::io::ErrorKind::ConnectionAborted.into()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Guarded<tokio::net::TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// `listener`'s connections under `limits`, counted in `registry`. A
/// failed accept (out of descriptors, say) is retried 10 ms later, not at
/// once (which would spin), and never ends the stream.
pub fn incoming(
    listener: tokio::net::TcpListener,
    limits: ConnLimits,
    registry: Arc<Registry>,
) -> Incoming {
    Incoming {
        listener,
        limits,
        registry,
        backoff: None,
    }
}

/// The stream of [`incoming`].
pub struct Incoming {
    listener: tokio::net::TcpListener,
    limits: ConnLimits,
    registry: Arc<Registry>,
    backoff: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl tokio_stream::Stream for Incoming {
    type Item = std::io::Result<Guarded<tokio::net::TcpStream>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(b) = self.backoff.as_mut() {
                if b.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.backoff = None;
            }
            match self.listener.poll_accept(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => {
                    tracing::debug!("accept failed: {e}");
                    self.registry
                        .warn(&format!("cannot accept connections ({e})"));
                    self.backoff = Some(Box::pin(tokio::time::sleep(Duration::from_millis(10))));
                }
                Poll::Ready(Ok((conn, remote))) => {
                    if conn.set_nodelay(true).is_err() {
                        continue;
                    }
                    let peer = conn.local_addr().ok().map(|l| (l, remote));
                    let limits = self.limits;
                    if let Some(g) = self.registry.admit(conn, peer, &limits) {
                        return Poll::Ready(Some(Ok(g)));
                    }
                }
            }
        }
    }
}

/// Raises this process's open-file limit to its hard limit: a server that
/// holds thousands of connections (and a worker its jobs' files) must not
/// run out at the default 1,024.
pub fn raise_fd_limit() {
    #[cfg(unix)]
    // SAFETY: getrlimit/setrlimit on a plain struct of this process.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn silent_connections_are_pushed_out_and_timed_out_and_a_speaking_one_is_not() {
        let limits = ConnLimits {
            max_open: 6,
            max_pending: 2,
            handshake: Duration::from_millis(300),
        };
        let reg = Arc::new(Registry::default());
        let (a, _a) = tokio::io::duplex(64);
        let (b, _b) = tokio::io::duplex(64);
        let (c, mut c_peer) = tokio::io::duplex(64);
        let mut ga = reg.admit(a, None, &limits).unwrap();
        let mut gb = reg.admit(b, None, &limits).unwrap();
        // A third pushes out the oldest silent one (`a`); its call passes
        // authentication, so it is established and pending no more.
        c_peer.write_all(&[0u8; 24]).await.unwrap();
        let mut gc = reg.admit(c, None, &limits).unwrap();
        gc.slot.established.store(true, Ordering::Release);
        let mut buf = [0u8; 64];
        assert_eq!(gc.read(&mut buf).await.unwrap(), 24);
        // A fourth fits beside `b`.
        let (d, _d) = tokio::io::duplex(64);
        let mut gd = reg.admit(d, None, &limits).unwrap();
        let e = ga.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionAborted);
        // `b` and `d` time out; `c` does not.
        assert_eq!(
            gb.read(&mut buf).await.unwrap_err().kind(),
            std::io::ErrorKind::TimedOut
        );
        assert_eq!(
            gd.read(&mut buf).await.unwrap_err().kind(),
            std::io::ErrorKind::TimedOut
        );
        c_peer.write_all(b"x").await.unwrap();
        assert_eq!(gc.read(&mut buf).await.unwrap(), 1);
        assert_eq!(reg.open(), 4);
        drop((ga, gb, gd));
        assert_eq!(reg.open(), 1);
        // Over `max_open`: refused at once.
        let held: Vec<_> = (0..5)
            .map(|_| reg.admit(tokio::io::duplex(8).0, None, &limits).unwrap())
            .collect();
        assert!(reg.admit(tokio::io::duplex(8).0, None, &limits).is_none());
        assert_eq!(reg.refused.load(Ordering::Relaxed), 1);
        drop(held);
        drop(gc);
        assert_eq!(reg.open(), 0);
    }
}
