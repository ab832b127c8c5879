//! The run's shared token: the first frame on every rank-to-rank connection is its
//! SHA-256, checked in constant time before anything else the peer sends is read, so that
//! whoever can reach the rendezvous port cannot join the world, feed it gradients or make
//! a rank allocate what a frame header announces.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::wire::{self, read_frame, write_frame};
use crate::error::TrainError;

/// The variable every rank reads the token from (the launcher sets it for its workers).
pub const TOKEN_ENV: &str = "AGENT_DIST_TOKEN";

/// The run's shared secret, as the ranks compare it; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct DistToken {
    digest: [u8; 32],
    /// Whether a secret was given: without one, ranks may meet on loopback only.
    given: bool,
}

impl fmt::Debug for DistToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.given { "DistToken(given)" } else { "DistToken(none)" })
    }
}

impl DistToken {
    /// The token `secret` (empty: none).
    pub fn new(secret: &str) -> DistToken {
        DistToken { digest: Sha256::digest(secret.as_bytes()).into(), given: !secret.is_empty() }
    }

    /// The token in [`TOKEN_ENV`], if set.
    pub fn from_env() -> DistToken {
        DistToken::new(&std::env::var(TOKEN_ENV).unwrap_or_default())
    }

    /// A fresh random secret for a launcher to hand its workers (64 hex digits).
    pub fn generate() -> String {
        let bytes: [u8; 32] = rand::random();
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Refuses to listen on `bind` (an address off loopback) without a token: anyone who
    /// reaches the port could join the run.
    pub(crate) fn require_for(&self, bind: SocketAddr, rank: usize) -> Result<(), TrainError> {
        if self.given || bind.ip().is_loopback() {
            return Ok(());
        }
        Err(TrainError::Config(format!(
            "rank {rank} would listen on {bind} for other ranks with no shared token, so anyone who reaches the port \
             could join the run: set {TOKEN_ENV} to the same secret on every host (or pass --dist-token to `agent \
             train`), or keep MASTER_ADDR on loopback for a one-host run"
        )))
    }

    /// Sends the token's frame, the first on a connection this rank opens.
    pub(crate) fn send(&self, w: &mut impl Write) -> io::Result<()> {
        write_frame(w, wire::TOKEN, &self.digest)
    }

    /// Reads a peer's first frame and checks it is this token; the error says why not,
    /// naming `peer`. Nothing past the token's frame is read, and a frame longer than a
    /// token's is refused from its header.
    pub(crate) fn check(&self, r: &mut impl Read, peer: &str) -> Result<(), String> {
        let (kind, given) = read_frame(r, self.digest.len() as u64, &|| ())
            .map_err(|e| format!("{peer} sent no rendezvous token ({e})"))?;
        if kind != wire::TOKEN || !same(&given, &self.digest) {
            return Err(format!(
                "{peer} gave a wrong rendezvous token: every rank needs the same {TOKEN_ENV} (or --dist-token)"
            ));
        }
        Ok(())
    }
}

/// Tells a refused peer why, then closes the connection without resetting it: what the
/// peer sent after its token (its hello) is drained briefly, a bounded amount, so that
/// the reason is not lost to a reset.
pub(crate) fn refuse(stream: &mut TcpStream, why: &str) {
    let _ = write_frame(stream, wire::REJECT, why.as_bytes());
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut sink = [0u8; 4096];
    let mut left = 64 << 10;
    while left > 0 {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => left -= n.min(left),
        }
    }
}

/// Equal contents, in a time that depends on the lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_right_token_passes_and_a_wrong_or_missing_one_is_named() {
        let token = DistToken::new("s3cret");
        let mut buf = Vec::new();
        token.send(&mut buf).unwrap();
        token.check(&mut buf.as_slice(), "10.0.0.9:4000").unwrap();
        let mut wrong = Vec::new();
        DistToken::new("guess").send(&mut wrong).unwrap();
        let err = token.check(&mut wrong.as_slice(), "10.0.0.9:4000").unwrap_err();
        assert!(err.contains("10.0.0.9:4000") && err.contains("wrong rendezvous token"), "{err}");
        // A peer that starts with a hello (an old build, a stranger) is refused from the header alone.
        let mut hello = vec![wire::HELLO];
        hello.extend(1000u64.to_le_bytes());
        assert!(token.check(&mut hello.as_slice(), "x").unwrap_err().contains("sent no rendezvous token"));
        assert!(!format!("{token:?}").contains("s3cret"));
    }

    fn world(rank: usize, port: u16, master: &str) -> super::super::WorldEnv {
        super::super::WorldEnv {
            rank,
            world_size: 2,
            local_rank: Some(rank),
            local_world_size: Some(2),
            master_addr: master.into(),
            master_port: port,
        }
    }

    fn id() -> super::super::Identity {
        super::super::Identity { binary: "b".repeat(64), preset: "p".repeat(64), seed: 1, out: "runs/x".into() }
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    /// Connects to the rendezvous on `port` as a stranger would, until it is up.
    fn stranger(port: u16) -> std::net::TcpStream {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            match std::net::TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => return s,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(50))
                }
                Err(e) => panic!("the rendezvous never listened: {e}"),
            }
        }
    }

    #[test]
    fn a_peer_with_a_wrong_token_is_refused_and_the_ranks_still_meet() {
        use super::super::{rendezvous_with, Collective};
        let port = free_port();
        let token = DistToken::new("right");
        let t0 = token.clone();
        let rank0 = std::thread::spawn(move || {
            let w =
                rendezvous_with(&world(0, port, "127.0.0.1"), &id(), &t0, std::time::Duration::from_secs(30)).unwrap();
            let all = w.all_gather_bytes(b"r0").unwrap();
            w.finish().unwrap();
            all
        });
        // A stranger with the wrong token, then a hello announcing 64 GiB: refused from the token frame.
        let mut s = stranger(port);
        DistToken::new("wrong").send(&mut s).unwrap();
        let (kind, why) = read_frame(&mut s, wire::MAX_HANDSHAKE_FRAME, &|| ()).unwrap();
        let why = String::from_utf8(why).unwrap();
        assert!(kind == wire::REJECT && why.contains("wrong rendezvous token"), "{kind}: {why}");
        let mut s = stranger(port);
        let mut huge = vec![wire::HELLO];
        huge.extend((64u64 << 30).to_le_bytes());
        s.write_all(&huge).unwrap();
        let (kind, why) = read_frame(&mut s, wire::MAX_HANDSHAKE_FRAME, &|| ()).unwrap();
        assert!(kind == wire::REJECT && String::from_utf8_lossy(&why).contains("no rendezvous token"));
        // The honest rank joins after them.
        let w =
            rendezvous_with(&world(1, port, "127.0.0.1"), &id(), &token, std::time::Duration::from_secs(30)).unwrap();
        let all = w.all_gather_bytes(b"r1").unwrap();
        w.finish().unwrap();
        assert_eq!(all, vec![b"r0".to_vec(), b"r1".to_vec()]);
        assert_eq!(rank0.join().unwrap(), all);
    }

    #[test]
    fn a_rank_with_another_token_fails_with_the_reason_and_rank_0_names_the_refused_peer() {
        use super::super::rendezvous_with;
        let port = free_port();
        let rank0 = std::thread::spawn(move || {
            let t = DistToken::new("right");
            rendezvous_with(&world(0, port, "127.0.0.1"), &id(), &t, std::time::Duration::from_secs(4)).err()
        });
        let err = rendezvous_with(
            &world(1, port, "127.0.0.1"),
            &id(),
            &DistToken::new("typo"),
            std::time::Duration::from_secs(4),
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(err.contains("wrong rendezvous token") && err.contains(TOKEN_ENV), "{err}");
        let err0 = rank0.join().unwrap().expect("rank 0 alone cannot start").to_string();
        assert!(err0.contains("refused for a missing or wrong token (127.0.0.1:"), "{err0}");
    }

    #[test]
    fn a_world_off_loopback_needs_a_token_before_it_listens() {
        use super::super::rendezvous_with;
        let port = free_port();
        let err = rendezvous_with(
            &world(0, port, "192.0.2.1"),
            &id(),
            &DistToken::new(""),
            std::time::Duration::from_secs(1),
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(err.contains(TOKEN_ENV) && err.contains(&format!("0.0.0.0:{port}")), "{err}");
        assert!(std::net::TcpListener::bind(("0.0.0.0", port)).is_ok(), "nothing listens on the port");
    }

    #[test]
    fn a_token_is_required_off_loopback_only() {
        let none = DistToken::new("");
        none.require_for("127.0.0.1:29500".parse().unwrap(), 0).unwrap();
        let err = none.require_for("0.0.0.0:29500".parse().unwrap(), 0).unwrap_err().to_string();
        assert!(err.contains(TOKEN_ENV) && err.contains("0.0.0.0:29500"), "{err}");
        DistToken::new("x").require_for("0.0.0.0:29500".parse().unwrap(), 0).unwrap();
        assert_eq!(DistToken::generate().len(), 64);
        assert_ne!(DistToken::generate(), DistToken::generate());
    }
}
