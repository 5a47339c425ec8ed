//! A TCP listener whose connections come out TLS-wrapped, for axum to serve.
//!
//! Go's counterpart is `crypto/tls.NewListener` (what controller-runtime's
//! metrics server wraps its listener in with `SecureServing`). Go runs the
//! handshake lazily on the connection's own goroutine; here a task per
//! connection does it and hands finished streams to [`axum::serve`], so a
//! client that stalls mid-handshake never holds up the next one, and one
//! that stalls longer than [`HANDSHAKE_TIMEOUT`] is dropped.
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client gets to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshaken connections, ready for HTTP. Dropping it stops accepting.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: std::io::Result<SocketAddr>,
    accepting: JoinHandle<()>,
}

impl TlsListener {
    /// Starts accepting on `listener` (call inside a tokio runtime).
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> Self {
        let local = listener.local_addr();
        let acceptor = TlsAcceptor::from(config);
        let (tx, ready) = mpsc::channel(64);
        let accepting = tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: back off
                        // instead of spinning (axum's own listener does too).
                        tracing::warn!(error = %error, "failed to accept a metrics connection");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, error = %error, "TLS handshake failed on the metrics port")
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out on the metrics port")
                        }
                    }
                });
            }
        });
        Self {
            ready,
            local,
            accepting,
        }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept task is gone (only when this listener is dropped):
            // no connection will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        match &self.local {
            Ok(addr) => Ok(*addr),
            Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
        }
    }
}
