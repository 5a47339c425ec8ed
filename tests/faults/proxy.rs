//! A TCP proxy between the operator and the API server, so network faults are
//! injected from outside the process under test. It relays bytes and never
//! looks inside them: TLS passes through end to end, so the operator still
//! verifies the API server's certificate (SAN 127.0.0.1; the proxy listens on
//! 127.0.0.1 too).
//!
//! Modes, switchable at run time ([`FaultProxy::set`]):
//! - `Pass`: relay.
//! - `Refuse`: new connections are reset as soon as they arrive (the
//!   client sees `connection reset`, as from a host whose port is closed);
//!   connections already open keep working.
//! - `Blackhole`: a partition. New connections are accepted but
//!   nothing is forwarded; open ones stop forwarding in both directions. Bytes
//!   read meanwhile are held, as a real network would retransmit them, and
//!   flow again when the mode goes back to `Pass` (connections the client
//!   gave up on are gone by then).
//!
//! And a latency, [`FaultProxy::set_upstream_delay`]: every byte from the
//! client to the API server is held that long (a delay line: order and
//! throughput kept, nothing else slowed), so each request the client sends is
//! in flight that long. A client that dies meanwhile has its last requests
//! delivered all the same, as on a real network, and its connection's end
//! (FIN) held behind them by [`FIN_HOLD`], so the server does not cancel
//! requests that reached it because their sender is gone.
//!
//! And two actions: [`FaultProxy::cut`] resets every open connection
//! mid-stream (watches included), as a load balancer restart or a NAT timeout
//! does; [`FaultProxy::strand`] makes every open connection half-open for
//! good (nothing forwarded either way, no FIN, no RST: a peer that vanished,
//! a NAT that dropped its state), while new connections pass.
//!
//! Mirrors: toxiproxy's `reset_peer` / `timeout` toxics, reduced to what the
//! fault suite needs.
#![allow(dead_code)] // Each scenario uses a different subset.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Refuse,
    Blackhole,
}

struct Shared {
    upstream: SocketAddr,
    mode: watch::Sender<Mode>,
    /// Bumped by [`FaultProxy::cut`]; every relay watches it.
    cuts: watch::Sender<u64>,
    /// Bumped by [`FaultProxy::strand`]; a relay opened before the bump
    /// forwards nothing more.
    strands: watch::Sender<u64>,
    /// Latency added to the client-to-server direction.
    upstream_delay: watch::Sender<Duration>,
    accepted: AtomicU64,
    reset: AtomicU64,
}

/// How long a delayed direction keeps the server's side open after the
/// client's end, once the held bytes are delivered (see the module docs).
pub const FIN_HOLD: Duration = Duration::from_secs(2);

/// A running proxy; dropping it stops accepting (open relays end with their peers).
pub struct FaultProxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and relays to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("the proxy binds a loopback port");
        let addr = listener.local_addr().expect("the proxy's address");
        let shared = Arc::new(Shared {
            upstream,
            mode: watch::channel(Mode::Pass).0,
            cuts: watch::channel(0).0,
            strands: watch::channel(0).0,
            upstream_delay: watch::channel(Duration::ZERO).0,
            accepted: AtomicU64::new(0),
            reset: AtomicU64::new(0),
        });
        let acceptor = tokio::spawn(accept_loop(listener, shared.clone()));
        Self {
            addr,
            shared,
            acceptor,
        }
    }

    pub fn set(&self, mode: Mode) {
        self.shared.mode.send_replace(mode);
    }

    pub fn mode(&self) -> Mode {
        *self.shared.mode.borrow()
    }

    /// Holds every byte the client sends for `delay` before it goes on to the
    /// API server (zero: none). Bytes already held keep their time.
    pub fn set_upstream_delay(&self, delay: Duration) {
        self.shared.upstream_delay.send_replace(delay);
    }

    /// Resets every connection open now.
    pub fn cut(&self) {
        self.shared.cuts.send_modify(|n| *n += 1);
    }

    /// Strands every connection open now: they stay open and silent for
    /// ever (until [`FaultProxy::cut`]); connections opened later pass.
    pub fn strand(&self) {
        self.shared.strands.send_modify(|n| *n += 1);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Connections reset so far (refused, or cut).
    pub fn reset_count(&self) -> u64 {
        self.shared.reset.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        // Ends the open relays too: they all watch `cuts`.
        self.cut();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        shared.accepted.fetch_add(1, Ordering::Relaxed);
        if *shared.mode.borrow() == Mode::Refuse {
            reset(client, &shared);
            continue;
        }
        tokio::spawn(relay(client, shared.clone()));
    }
}

/// Closes with RST rather than FIN: the client sees an error, not a clean end.
/// (`set_linger` is deprecated because a non-zero linger blocks the thread on
/// drop; a zero linger does not block, it resets.)
#[allow(deprecated)]
fn reset(stream: TcpStream, shared: &Shared) {
    shared.reset.fetch_add(1, Ordering::Relaxed);
    let _ = stream.set_linger(Some(Duration::ZERO));
    drop(stream);
}

#[allow(deprecated)] // set_linger(0): see `reset`
async fn relay(client: TcpStream, shared: Arc<Shared>) {
    let born = *shared.strands.borrow();
    let mut cuts = shared.cuts.subscribe();
    cuts.mark_unchanged();
    let mut mode = shared.mode.subscribe();
    // In a partition even the connect to the API server waits.
    let upstream = tokio::select! {
        _ = passable(&mut mode) => TcpStream::connect(shared.upstream).await,
        _ = cuts.changed() => return reset(client, &shared),
    };
    let Ok(upstream) = upstream else {
        return reset(client, &shared);
    };
    for stream in [&client, &upstream] {
        let _ = stream.set_nodelay(true);
        // Linger 0: dropping the socket sends RST, so a cut is a reset
        // mid-stream. A relay whose both directions ended has sent its FINs
        // already, so for it this changes nothing.
        let _ = stream.set_linger(Some(Duration::ZERO));
    }
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let gate = |shared: &Shared| Gate {
        mode: shared.mode.subscribe(),
        strands: shared.strands.subscribe(),
        born,
    };
    let delay = shared.upstream_delay.subscribe();
    let up = delayed_pipe(client_read, upstream_write, gate(&shared), delay);
    let down = pipe(upstream_read, client_write, gate(&shared));
    tokio::select! {
        ended = async { tokio::join!(up, down) } => {
            // Both directions ended by themselves: nothing to reset.
            let _ = ended;
        }
        _ = cuts.changed() => {
            // Dropping the pipes drops both sockets: RST both ways (linger 0).
            shared.reset.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Returns once the mode lets bytes through.
async fn passable(mode: &mut watch::Receiver<Mode>) {
    let _ = mode.wait_for(|m| *m != Mode::Blackhole).await;
}

/// What a relay's bytes wait for: the mode to let them through, and the
/// relay not to be stranded (opened before the last [`FaultProxy::strand`]).
struct Gate {
    mode: watch::Receiver<Mode>,
    strands: watch::Receiver<u64>,
    born: u64,
}

impl Gate {
    async fn open(&mut self) {
        if *self.strands.borrow() > self.born {
            std::future::pending::<()>().await;
        }
        passable(&mut self.mode).await;
    }
}

/// One direction: read, wait while blackholed or stranded, write. Readiness plus
/// `try_read`/`try_write` rather than `AsyncRead`, which needs tokio's
/// `io-util` feature (not enabled in this crate). Dropping `to` at the end
/// shuts its direction down (FIN).
async fn pipe(from: OwnedReadHalf, to: OwnedWriteHalf, mut gate: Gate) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        gate.open().await;
        if from.readable().await.is_err() {
            break;
        }
        let n = match from.try_read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => break,
        };
        gate.open().await;
        if write_all(&to, &buf[..n]).await.is_err() {
            break;
        }
    }
}

/// [`pipe`] through a delay line: each chunk read is written `delay` (read
/// when the chunk arrives) later, in order. When the client's side ends, what
/// is held is still delivered and the other side stays open [`FIN_HOLD`]
/// longer (when a delay is set).
async fn delayed_pipe(
    from: OwnedReadHalf,
    to: OwnedWriteHalf,
    mut gate: Gate,
    delay: watch::Receiver<Duration>,
) {
    let (held, mut due) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let mut read_gate = Gate {
        mode: gate.mode.clone(),
        strands: gate.strands.clone(),
        born: gate.born,
    };
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            read_gate.open().await;
            if from.readable().await.is_err() {
                break;
            }
            let n = match from.try_read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => break,
            };
            let at = tokio::time::Instant::now() + *delay.borrow();
            if held.send((at, buf[..n].to_vec())).is_err() {
                break;
            }
        }
        *delay.borrow() > Duration::ZERO
    };
    let writer = async {
        while let Some((at, bytes)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            gate.open().await;
            if write_all(&to, &bytes).await.is_err() {
                return;
            }
        }
    };
    let (delayed, ()) = tokio::join!(reader, writer);
    if delayed {
        tokio::time::sleep(FIN_HOLD).await;
    }
}

async fn write_all(to: &OwnedWriteHalf, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        to.writable().await?;
        match to.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// An upstream that echoes every byte back.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (r, w) = stream.into_split();
                    let mut buf = vec![0u8; 1024];
                    loop {
                        if r.readable().await.is_err() {
                            return;
                        }
                        match r.try_read(&mut buf) {
                            Ok(0) => return,
                            Ok(n) => {
                                if write_all(&w, &buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(_) => return,
                        }
                    }
                });
            }
        });
        addr
    }

    /// Sends `msg` and reads one answer within `within`: Ok(bytes) or Err(why).
    async fn round_trip(
        stream: &TcpStream,
        msg: &[u8],
        within: Duration,
    ) -> Result<Vec<u8>, String> {
        tokio::time::timeout(within, async {
            stream.writable().await.map_err(|e| e.to_string())?;
            stream.try_write(msg).map_err(|e| e.to_string())?;
            let mut buf = vec![0u8; 64];
            loop {
                stream.readable().await.map_err(|e| e.to_string())?;
                match stream.try_read(&mut buf) {
                    Ok(0) => return Err("EOF".to_string()),
                    Ok(n) => return Ok(buf[..n].to_vec()),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
        })
        .await
        .map_err(|_| "timed out".to_string())?
    }

    const QUICK: Duration = Duration::from_millis(300);

    #[tokio::test]
    async fn the_proxy_relays_refuses_blackholes_and_cuts_on_command() {
        let proxy = FaultProxy::start(echo().await).await;
        let open = TcpStream::connect(proxy.addr).await.expect("connect");
        assert_eq!(round_trip(&open, b"a", QUICK).await, Ok(b"a".to_vec()));

        // Refuse: a new connection is reset; the open one still works.
        proxy.set(Mode::Refuse);
        let refused = TcpStream::connect(proxy.addr)
            .await
            .expect("the TCP handshake completes");
        assert!(round_trip(&refused, b"b", QUICK).await.is_err());
        assert_eq!(round_trip(&open, b"c", QUICK).await, Ok(b"c".to_vec()));

        // Blackhole: nothing comes back, until the partition heals.
        proxy.set(Mode::Blackhole);
        assert_eq!(
            round_trip(&open, b"d", QUICK).await,
            Err("timed out".to_string())
        );
        proxy.set(Mode::Pass);
        assert_eq!(round_trip(&open, b"", QUICK).await, Ok(b"d".to_vec()));

        // Cut: the open connection is reset mid-stream.
        proxy.cut();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(round_trip(&open, b"e", QUICK).await.is_err());
        let fresh = TcpStream::connect(proxy.addr).await.expect("connect");
        assert_eq!(round_trip(&fresh, b"f", QUICK).await, Ok(b"f".to_vec()));

        // Strand: the open connection goes silent without closing; a new one passes.
        proxy.strand();
        assert_eq!(
            round_trip(&fresh, b"g", QUICK).await,
            Err("timed out".to_string())
        );
        let after = TcpStream::connect(proxy.addr).await.expect("connect");
        assert_eq!(round_trip(&after, b"h", QUICK).await, Ok(b"h".to_vec()));
        assert_eq!(
            round_trip(&fresh, b"", QUICK).await,
            Err("timed out".to_string())
        );
    }

    #[tokio::test]
    async fn a_delay_holds_the_clients_bytes_and_delivers_them_after_the_client_is_gone() {
        let proxy = FaultProxy::start(echo().await).await;
        let open = TcpStream::connect(proxy.addr).await.expect("connect");
        assert_eq!(round_trip(&open, b"a", QUICK).await, Ok(b"a".to_vec()));

        proxy.set_upstream_delay(Duration::from_millis(400));
        let sent = std::time::Instant::now();
        assert_eq!(
            round_trip(&open, b"b", Duration::from_secs(2)).await,
            Ok(b"b".to_vec())
        );
        let took = sent.elapsed();
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_secs(1),
            "a round trip through a 400 ms delay took {took:?}"
        );

        // An upstream that records what reaches it: bytes sent just before
        // the client vanished still arrive.
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let sink = FaultProxy::start(listener.local_addr().expect("addr")).await;
        sink.set_upstream_delay(Duration::from_millis(300));
        let client = TcpStream::connect(sink.addr).await.expect("connect");
        let (server, _) = listener
            .accept()
            .await
            .expect("the proxy connects upstream");
        client.writable().await.expect("writable");
        client.try_write(b"last words").expect("write");
        drop(client);
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        let ended = tokio::time::timeout(Duration::from_secs(1) + FIN_HOLD, async {
            loop {
                server.readable().await.expect("readable");
                match server.try_read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => return,
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "the server side ends after the hold");
        assert_eq!(got, b"last words".to_vec());
    }
}
