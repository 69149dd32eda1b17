//! Reaching a server: the addresses of a cluster (a list, and every DNS
//! record of each name) tried in random order, and the connection a
//! session or a v1 request runs on, plain TCP or TLS.
//!
//! Guarantees: every attempt is bounded in time; a [`Conn`] may be read by
//! one thread while others write to it or shut it down.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "tls")]
use std::sync::Mutex;

/// Splits `"a:22119,b:22119"` into its addresses, each with the default
/// port added when it names none.
pub(crate) fn split_addresses(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| crate::add_default_port(a.to_owned()))
        .collect()
}

/// A random number from the standard library's per-process random keys.
fn random() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    h.finish()
}

/// A random duration below `max`: the jitter of a back-off.
pub(crate) fn jitter(max: Duration) -> Duration {
    let n = max.as_micros().max(1) as u64;
    Duration::from_micros(random() % n)
}

/// Every socket address of `addresses` (each name resolved: all its
/// records), in random order, each with the host name it was given as (for
/// TLS). A name that does not resolve is left out; `Err` when none does.
pub(crate) fn resolve(addresses: &[String]) -> io::Result<Vec<(SocketAddr, String)>> {
    let mut all = Vec::new();
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address given");
    for a in addresses {
        match a.to_socket_addrs() {
            Ok(found) => {
                let host = host_of(a);
                all.extend(found.map(|s| (s, host.clone())));
            }
            Err(e) => last = io::Error::new(e.kind(), format!("{a}: {e}")),
        }
    }
    if all.is_empty() {
        return Err(last);
    }
    // Fisher-Yates: a cluster's clients spread over its nodes.
    for i in (1..all.len()).rev() {
        let j = (random() % (i as u64 + 1)) as usize;
        all.swap(i, j);
    }
    Ok(all)
}

/// The host part of `host:port` (`[::1]:7` gives `::1`).
fn host_of(address: &str) -> String {
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned()
}

/// The connection a session or a v1 request runs on. Cheap to clone: clones share the
/// socket (and the TLS state). One thread reads, any may write or shut
/// it down.
#[derive(Clone)]
pub(crate) struct Conn {
    tcp: Arc<TcpStream>,
    #[cfg(feature = "tls")]
    tls: Option<Arc<TlsConn>>,
}

#[cfg(feature = "tls")]
struct TlsConn {
    /// Guards the TLS state machine: records in and out, plaintext in.
    state: Mutex<rustls::ClientConnection>,
    /// Guards the socket's write side, taken while `state` is held so that
    /// records leave in the order they were made, then held alone for the
    /// write (a reader blocked on `state` never waits for a slow write).
    write: Mutex<()>,
}

impl Conn {
    /// Connects to `addr` within `timeout`, with TLS when `tls` is given
    /// (`host` is the name the certificate must show unless the
    /// configuration names one).
    pub(crate) fn connect(
        addr: &SocketAddr,
        host: &str,
        timeout: Duration,
        tls: Option<&crate::TlsConfig>,
    ) -> io::Result<Conn> {
        let tcp = TcpStream::connect_timeout(addr, timeout)?;
        // Frames are small and batched by the writer: send them at once.
        tcp.set_nodelay(true)?;
        let conn = Conn {
            tcp: Arc::new(tcp),
            #[cfg(feature = "tls")]
            tls: None,
        };
        match tls {
            None => Ok(conn),
            #[cfg(feature = "tls")]
            Some(t) => conn.handshake(t, host, timeout),
            #[cfg(not(feature = "tls"))]
            Some(t) => {
                let _ = host;
                match *t {}
            }
        }
    }

    #[cfg(feature = "tls")]
    fn handshake(
        mut self,
        t: &crate::TlsConfig,
        host: &str,
        timeout: Duration,
    ) -> io::Result<Conn> {
        let name = t.server_name_for(host)?;
        let mut c = rustls::ClientConnection::new(Arc::clone(&t.config), name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        self.tcp.set_read_timeout(Some(timeout))?;
        self.tcp.set_write_timeout(Some(timeout))?;
        let mut sock = &*self.tcp;
        while c.is_handshaking() {
            c.complete_io(&mut sock)?;
        }
        self.tls = Some(Arc::new(TlsConn {
            state: Mutex::new(c),
            write: Mutex::new(()),
        }));
        Ok(self)
    }

    pub(crate) fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.tcp.set_read_timeout(t)
    }

    pub(crate) fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.tcp.set_write_timeout(t)
    }

    /// Closes both directions; a read or write blocked on it ends.
    pub(crate) fn shutdown(&self) {
        let _ = self.tcp.shutdown(Shutdown::Both);
    }

    /// Ends the write side, the v1 hang-up: over TLS a close_notify, then
    /// the socket's FIN either way. The read side stays open, so an answer
    /// already on its way is still read.
    pub(crate) fn close_write(&self) -> io::Result<()> {
        #[cfg(feature = "tls")]
        if let Some(t) = &self.tls {
            let mut records = Vec::new();
            let w = {
                let mut c = crate::session::lock(&t.state);
                c.send_close_notify();
                while c.wants_write() {
                    c.write_tls(&mut records)?;
                }
                crate::session::lock(&t.write)
            };
            // A peer that is already gone makes this fail: the FIN below
            // (or the closed socket) is the hang-up then.
            let sent = (&*self.tcp).write_all(&records);
            drop(w);
            let fin = self.tcp.shutdown(Shutdown::Write);
            return sent.and(fin);
        }
        self.tcp.shutdown(Shutdown::Write)
    }

    /// Writes all of `buf`.
    pub(crate) fn write_all(&self, buf: &[u8]) -> io::Result<()> {
        #[cfg(feature = "tls")]
        if let Some(t) = &self.tls {
            let mut records = Vec::with_capacity(buf.len() + 64);
            let w = {
                let mut c = crate::session::lock(&t.state);
                c.writer().write_all(buf)?;
                while c.wants_write() {
                    c.write_tls(&mut records)?;
                }
                crate::session::lock(&t.write)
            };
            (&*self.tcp).write_all(&records)?;
            drop(w);
            return Ok(());
        }
        (&*self.tcp).write_all(buf)
    }

    /// Reads some bytes; `Ok(0)` at the end of the stream. One thread only.
    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        #[cfg(feature = "tls")]
        if let Some(t) = &self.tls {
            return self.read_tls(t, buf);
        }
        (&*self.tcp).read(buf)
    }

    #[cfg(feature = "tls")]
    fn read_tls(&self, t: &TlsConn, buf: &mut [u8]) -> io::Result<usize> {
        let mut raw = [0u8; 16 * 1024];
        loop {
            {
                let mut c = crate::session::lock(&t.state);
                match c.reader().read(buf) {
                    Ok(n) => return Ok(n), // 0: the server's close_notify
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            let n = (&*self.tcp).read(&mut raw)?;
            if n == 0 {
                return Ok(0);
            }
            let mut c = crate::session::lock(&t.state);
            let mut fed = &raw[..n];
            while !fed.is_empty() {
                c.read_tls(&mut fed)?;
                c.process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            }
            if c.wants_write() {
                // An alert or a key update of the protocol's own.
                let mut records = Vec::new();
                while c.wants_write() {
                    c.write_tls(&mut records)?;
                }
                let w = crate::session::lock(&t.write);
                drop(c);
                (&*self.tcp).write_all(&records)?;
                drop(w);
            }
        }
    }

    /// Reads exactly `buf.len()` bytes.
    pub(crate) fn read_exact(&self, buf: &mut [u8]) -> io::Result<()> {
        let mut got = 0;
        while got < buf.len() {
            match self.read(&mut buf[got..]) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed",
                    ))
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
