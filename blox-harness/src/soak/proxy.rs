//! A TCP proxy on loopback that can cut the connection it carries, as a
//! network partition would: while cut, bytes stop flowing both ways on the
//! open connections and new connections are accepted but never answered
//! (callers see timeouts, not refusals). Restoring drops what was held, so
//! both ends reconnect.

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A cuttable proxy to one address; dropping it stops it.
pub struct CutProxy {
    /// Where callers connect instead of the target.
    pub addr: SocketAddr,
    cut: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    /// Listens on `listen` (port 0: any) and forwards to `target`, which
    /// need not be up yet (each connection dials it afresh).
    pub async fn start(listen: SocketAddr, target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    continue;
                };
                let _ = inbound.set_nodelay(true);
                tokio::spawn(carry(inbound, target, rx.clone()));
            }
        });
        Ok(CutProxy {
            addr,
            cut: Arc::new(tx),
            task,
        })
    }

    /// Cuts the link until [`CutProxy::restore`].
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Ends the cut: held connections are dropped and new ones go through.
    pub fn restore(&self) {
        self.cut.send_replace(false);
    }

    pub fn is_cut(&self) -> bool {
        *self.cut.borrow()
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Holds `sockets` silently until the cut ends.
async fn hold<T>(sockets: T, mut cut: watch::Receiver<bool>) {
    while *cut.borrow_and_update() {
        if cut.changed().await.is_err() {
            break;
        }
    }
    drop(sockets);
}

async fn carry(mut inbound: TcpStream, target: SocketAddr, mut cut: watch::Receiver<bool>) {
    if *cut.borrow_and_update() {
        return hold(inbound, cut).await;
    }
    let mut outbound = match TcpStream::connect(target).await {
        Ok(s) => s,
        Err(_) => return,
    };
    let _ = outbound.set_nodelay(true);
    let cut_now = {
        let copy = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
        tokio::pin!(copy);
        loop {
            tokio::select! {
                _ = &mut copy => break false,
                changed = cut.changed() => {
                    if changed.is_err() {
                        break false;
                    }
                    if *cut.borrow_and_update() {
                        break true;
                    }
                }
            }
        }
    };
    if cut_now {
        hold((inbound, outbound), cut).await;
    }
}
