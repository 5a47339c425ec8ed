//! The listeners the manager's servers bind, dual-stack as Go's are.
//!
//! controller-runtime's `:8081` is Go's `net.Listen("tcp", ":8081")`: one
//! socket on `[::]` with `IPV6_V6ONLY` off, which accepts IPv6 clients and
//! IPv4 ones (as `::ffff:a.b.c.d`), so the probes answer in IPv4-only,
//! IPv6-only and dual-stack clusters alike. Where the host has IPv6 off (the
//! socket cannot be made, or `[::]` cannot be bound), Go listens on IPv4
//! alone, and so do we: `0.0.0.0`, same port. Any other address binds as
//! given. [`bind`] is synchronous: a bind never waits on the network.
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdListener};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

/// Connections waiting to be accepted (Go and tokio use the system's
/// maximum; 1024 is tokio's default for `TcpListener::bind`).
const BACKLOG: i32 = 1024;

/// Binds `addr`; `[::]:port` dual-stack, falling back to `0.0.0.0:port`
/// where IPv6 is off. Must run inside a tokio runtime.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let listener = if is_every_interface_v6(addr) {
        bind_dual_stack_or_v4(addr.port(), |port| socket_on(every_v6(port), true))?
    } else {
        socket_on(addr, false)?
    };
    TcpListener::from_std(listener)
}

fn is_every_interface_v6(addr: SocketAddr) -> bool {
    matches!(addr, SocketAddr::V6(v6) if v6.ip().is_unspecified())
}

fn every_v6(port: u16) -> SocketAddr {
    SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port))
}

/// The dual-stack socket `dual_stack` makes, or IPv4's every-interface one
/// when that fails for lack of IPv6. A port in use, or a permission
/// refused, is an answer for IPv4 too: returned, not retried.
fn bind_dual_stack_or_v4(
    port: u16,
    dual_stack: impl FnOnce(u16) -> io::Result<StdListener>,
) -> io::Result<StdListener> {
    match dual_stack(port) {
        Ok(listener) => Ok(listener),
        Err(e) if no_ipv6(&e) => {
            tracing::info!(port, error = %e, "IPv6 is not available; listening on IPv4 only (0.0.0.0)");
            socket_on(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)), false)
        }
        Err(e) => Err(e),
    }
}

/// The errors a host without IPv6 answers: no such address family or
/// protocol, or no IPv6 address to bind.
fn no_ipv6(e: &io::Error) -> bool {
    !matches!(
        e.kind(),
        io::ErrorKind::AddrInUse | io::ErrorKind::PermissionDenied
    )
}

/// A listening, non-blocking socket on `addr`, with `SO_REUSEADDR` (as
/// tokio's `bind` and Go set it) and, for `dual_stack`, `IPV6_V6ONLY` off.
fn socket_on(addr: SocketAddr, dual_stack: bool) -> io::Result<StdListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if dual_stack {
        socket.set_only_v6(false)?;
    }
    #[cfg(unix)]
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// Connects to `port` on `ip` and has the listener accept it.
    async fn accepts(listener: &TcpListener, ip: &str) -> io::Result<SocketAddr> {
        let target: SocketAddr = format!("{ip}:{}", listener.local_addr()?.port())
            .parse()
            .map_err(io::Error::other)?;
        let mut client = tokio::net::TcpStream::connect(target).await?;
        client.write_all(b"x").await?;
        let (_, peer) = listener.accept().await?;
        Ok(peer)
    }

    fn has_ipv6_loopback() -> bool {
        StdListener::bind("[::1]:0").is_ok()
    }

    #[tokio::test]
    async fn every_interface_accepts_ipv6_and_ipv4_clients_on_one_port() {
        if !has_ipv6_loopback() {
            eprintln!("SKIPPED: this host has no IPv6 loopback (::1) to connect from");
            return;
        }
        let listener = bind(every_v6(0)).unwrap();
        assert!(listener.local_addr().unwrap().is_ipv6());
        let from_v6 = accepts(&listener, "[::1]").await.unwrap();
        assert_eq!(from_v6.ip().to_string(), "::1");
        let from_v4 = accepts(&listener, "127.0.0.1").await.unwrap();
        // IPv4 clients of a dual-stack socket arrive as IPv4-mapped addresses.
        assert_eq!(from_v4.ip().to_string(), "::ffff:127.0.0.1");
    }

    #[tokio::test]
    async fn without_ipv6_every_interface_falls_back_to_ipv4() {
        let no_ipv6 = |_| Err(io::Error::from_raw_os_error(97)); // EAFNOSUPPORT
        let listener = TcpListener::from_std(bind_dual_stack_or_v4(0, no_ipv6).unwrap()).unwrap();
        let local = listener.local_addr().unwrap();
        assert_eq!(local.ip(), Ipv4Addr::UNSPECIFIED);
        accepts(&listener, "127.0.0.1").await.unwrap();
    }

    #[tokio::test]
    async fn a_port_in_use_is_an_error_not_a_silent_ipv4_listener() {
        let in_use = |_| Err(io::Error::from(io::ErrorKind::AddrInUse));
        let err = bind_dual_stack_or_v4(0, in_use).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
    }

    #[tokio::test]
    async fn an_ipv4_address_binds_ipv4_only() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        accepts(&listener, "127.0.0.1").await.unwrap();
        if has_ipv6_loopback() {
            assert!(accepts(&listener, "[::1]").await.is_err());
        }
    }
}
