//! The rendezvous on the master address: rank 0 listens, every other rank connects and
//! introduces itself; rank 0 checks that all run the same binary, preset, seed and output
//! folder, and admits them all or refuses them all with one message. The admission carries
//! the roster (every rank's host, and the address of its ring listener); each rank then
//! connects to the next one around the ring and accepts the previous one.

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use agent_llm::models::{hash_file, hex};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::auth::DistToken;
use super::env::WorldEnv;
use super::tcp::TcpWorld;
use super::wire::{self, read_frame, write_frame};
use crate::error::TrainError;

/// What every rank must agree on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// SHA-256 of the running executable.
    pub binary: String,
    /// SHA-256 of the effective preset (after command-line overrides).
    pub preset: String,
    /// The run's seed.
    pub seed: u64,
    /// The output folder as this rank names it (ranks on several hosts must write to one shared folder).
    #[serde(default)]
    pub out: String,
}

impl Identity {
    /// The identity of this process running `preset_text` with `seed` into the folder `out`.
    pub fn of_this_process(preset_text: &str, seed: u64, out: &std::path::Path) -> Result<Identity, TrainError> {
        let exe = std::env::current_exe().map_err(|e| TrainError::Other(format!("cannot find this program: {e}")))?;
        let (_, binary) =
            hash_file(&exe).map_err(|e| TrainError::Other(format!("cannot fingerprint this program: {e}")))?;
        Ok(Identity {
            binary,
            preset: hex(&Sha256::digest(preset_text.as_bytes())),
            seed,
            out: out.display().to_string(),
        })
    }

    /// What differs between `self` (rank `r`) and rank 0's `base`, in words.
    fn differences(&self, r: usize, base: &Identity) -> Vec<String> {
        let short = |s: &str| s.chars().take(12).collect::<String>();
        let mut out = Vec::new();
        if self.binary != base.binary {
            out.push(format!(
                "rank {r} runs another build of agent (sha256 {}…, rank 0 runs {}…)",
                short(&self.binary),
                short(&base.binary)
            ));
        }
        if self.preset != base.preset {
            out.push(format!(
                "rank {r} has another preset (sha256 {}…, rank 0 has {}…)",
                short(&self.preset),
                short(&base.preset)
            ));
        }
        if self.seed != base.seed {
            out.push(format!("rank {r} has seed {} (rank 0 has {})", self.seed, base.seed));
        }
        if self.out != base.out {
            out.push(format!("rank {r} writes to --out {:?} (rank 0 to {:?})", self.out, base.out));
        }
        out
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    rank: usize,
    world_size: usize,
    identity: Identity,
    host: String,
    pid: u32,
    /// The port of this rank's ring listener (its address is the one rank 0 sees it connect from).
    ring_port: u16,
}

/// What rank 0 sends every rank it admits.
#[derive(Debug, Serialize, Deserialize)]
struct Roster {
    /// Every rank's host name, in rank order.
    hosts: Vec<String>,
    /// Every rank's ring listener, in rank order.
    ring: Vec<String>,
}

/// Joins the world `env` describes; fails on every rank with the same message when the
/// ranks disagree, and on a rank that finds no rank 0 (or rank 0 missing ranks) within `timeout`.
/// The ranks' shared token is [`super::auth::TOKEN_ENV`]'s.
pub fn rendezvous(env: &WorldEnv, identity: &Identity, timeout: Duration) -> Result<TcpWorld, TrainError> {
    rendezvous_with(env, identity, &DistToken::from_env(), timeout)
}

/// [`rendezvous`] with the token given: every connection between ranks starts with it,
/// and a world that listens off loopback needs one.
pub fn rendezvous_with(
    env: &WorldEnv,
    identity: &Identity,
    token: &DistToken,
    timeout: Duration,
) -> Result<TcpWorld, TrainError> {
    if env.world_size == 1 {
        return TcpWorld::start(0, 1, Vec::new(), None, vec![hostname()]);
    }
    let deadline = Instant::now() + timeout;
    // Listens where the master address does: loopback for a one-host run, every interface otherwise.
    let bind = bind_address(env)?;
    token.require_for(bind, env.rank)?;
    let ring_bind = SocketAddr::new(bind.ip(), 0);
    let ring = TcpListener::bind(ring_bind)
        .map_err(|e| TrainError::Distributed(format!("rank {} cannot listen for its ring neighbour: {e}", env.rank)))?;
    let (peers, roster) = if env.rank == 0 {
        host_rendezvous(env, identity, token, &ring, deadline, timeout)?
    } else {
        join_rendezvous(env, identity, token, &ring, deadline, timeout)?
    };
    let streams = connect_ring(env, token, &ring, &roster, deadline)?;
    TcpWorld::start(env.rank, env.world_size, peers, Some(streams), roster.hosts)
}

/// Connects to the next rank's ring listener and accepts the previous rank on this one's.
fn connect_ring(
    env: &WorldEnv,
    token: &DistToken,
    listener: &TcpListener,
    roster: &Roster,
    deadline: Instant,
) -> Result<(TcpStream, TcpStream), TrainError> {
    let (w, r) = (env.world_size, env.rank);
    let (next, prev) = ((r + 1) % w, (r + w - 1) % w);
    let target = roster.ring.get(next).cloned().unwrap_or_default();
    let mut to_next = loop {
        let attempt = target
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.find_map(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).ok()));
        if let Some(s) = attempt {
            break s;
        }
        if Instant::now() > deadline {
            return Err(TrainError::Distributed(format!(
                "rank {r} cannot reach rank {next}'s ring listener at {target}: is the port range between the hosts \
                 open?"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    token
        .send(&mut to_next)
        .and_then(|()| write_frame(&mut to_next, wire::RING, &(r as u64).to_le_bytes()))
        .map_err(|e| TrainError::Distributed(format!("rank {next} closed the ring connection: {e}")))?;
    listener.set_nonblocking(true).map_err(|e| TrainError::Distributed(format!("ring socket: {e}")))?;
    let from_prev = loop {
        if Instant::now() > deadline {
            return Err(TrainError::Distributed(format!("rank {prev} did not connect to rank {r} around the ring")));
        }
        let (mut stream, from) = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => return Err(TrainError::Distributed(format!("ring: accepting rank {prev} failed: {e}"))),
        };
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        if let Err(why) = token.check(&mut stream, &format!("a connection to rank {r}'s ring listener from {from}")) {
            tracing::warn!("{why}; refused");
            continue;
        }
        match read_frame(&mut stream, wire::MAX_HANDSHAKE_FRAME, &|| ()) {
            Ok((wire::RING, b))
                if b.len() == 8 && u64::from_le_bytes(b.as_slice().try_into().unwrap_or_default()) == prev as u64 =>
            {
                let _ = stream.set_read_timeout(None);
                break stream;
            }
            // Not the previous rank (a port scan): ignore it.
            _ => continue,
        }
    };
    Ok((to_next, from_prev))
}

/// Connections to the other ranks, (rank, description, stream).
type Peers = Vec<(usize, String, TcpStream)>;

fn host_rendezvous(
    env: &WorldEnv,
    identity: &Identity,
    token: &DistToken,
    ring: &TcpListener,
    deadline: Instant,
    timeout: Duration,
) -> Result<(Peers, Roster), TrainError> {
    let bind = bind_address(env)?;
    // Peers refused for their token, for the message should the run not come together.
    let mut strangers: Vec<SocketAddr> = Vec::new();
    let listener = TcpListener::bind(bind).map_err(|e| {
        TrainError::Distributed(format!(
            "rank 0 cannot listen on {bind} for the other ranks: {e} (another run on this MASTER_PORT? choose another \
             with --master-port)"
        ))
    })?;
    listener.set_nonblocking(true).map_err(|e| TrainError::Distributed(format!("rendezvous socket: {e}")))?;
    let mut joined: Vec<Option<(Hello, TcpStream)>> = (0..env.world_size).map(|_| None).collect();
    let ring_port = ring.local_addr().map_err(|e| TrainError::Distributed(format!("ring socket: {e}")))?.port();
    let mut ring_addrs = vec![String::new(); env.world_size];
    ring_addrs[0] = format!("{}:{ring_port}", env.master_addr);
    while joined.iter().skip(1).any(Option::is_none) {
        if Instant::now() > deadline {
            let missing: Vec<String> =
                (1..env.world_size).filter(|r| joined[*r].is_none()).map(|r| r.to_string()).collect();
            let mut why = format!(
                "rank(s) {} did not join the rendezvous on {bind} within {} s: are they started, with MASTER_ADDR \
                 and MASTER_PORT pointing here?",
                missing.join(", "),
                timeout.as_secs()
            );
            if !strangers.is_empty() {
                let from: Vec<String> = strangers.iter().map(ToString::to_string).collect();
                why.push_str(&format!(
                    " {} connection(s) were refused for a missing or wrong token ({}): every rank needs the same {}",
                    strangers.len(),
                    from.join(", "),
                    super::auth::TOKEN_ENV
                ));
            }
            refuse_all(&mut joined, &why);
            return Err(TrainError::Distributed(why));
        }
        let (mut stream, from) = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(e) => return Err(TrainError::Distributed(format!("rendezvous: accepting a rank failed: {e}"))),
        };
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        // Nothing else is read from a peer before its token checks out.
        if let Err(why) = token.check(&mut stream, &from.to_string()) {
            tracing::warn!("rendezvous: {why}; refused, still waiting for the ranks");
            super::auth::refuse(&mut stream, &why);
            strangers.push(from);
            continue;
        }
        let hello = match read_frame(&mut stream, wire::MAX_HANDSHAKE_FRAME, &|| ()) {
            Ok((wire::HELLO, payload)) => match serde_json::from_slice::<Hello>(&payload) {
                Ok(h) => h,
                Err(_) => continue,
            },
            // Not one of ours (a port scan, a health check): ignore it.
            _ => continue,
        };
        let refuse = |stream: &mut TcpStream, why: &str| {
            let _ = write_frame(stream, wire::REJECT, why.as_bytes());
        };
        if hello.world_size != env.world_size {
            let why = format!(
                "rank {} ({}) was started with WORLD_SIZE={} but rank 0 has {}",
                hello.rank, hello.host, hello.world_size, env.world_size
            );
            refuse(&mut stream, &why);
            refuse_all(&mut joined, &why);
            return Err(TrainError::Distributed(why));
        }
        if hello.rank == 0 || hello.rank >= env.world_size || joined[hello.rank].is_some() {
            let why = format!("two processes claim rank {} (one from {from}): check RANK on every host", hello.rank);
            refuse(&mut stream, &why);
            refuse_all(&mut joined, &why);
            return Err(TrainError::Distributed(why));
        }
        let r = hello.rank;
        ring_addrs[r] = SocketAddr::new(from.ip(), hello.ring_port).to_string();
        joined[r] = Some((hello, stream));
    }
    let problems: Vec<String> =
        joined.iter().flatten().flat_map(|(h, _)| h.identity.differences(h.rank, identity)).collect();
    if !problems.is_empty() {
        let why = format!(
            "the ranks disagree, so none starts: {}. Every rank must run the same agent build with the same preset \
             and seed.",
            problems.join("; ")
        );
        refuse_all(&mut joined, &why);
        return Err(TrainError::Config(why));
    }
    let mut hosts = vec![hostname()];
    hosts.extend(joined.iter().flatten().map(|(h, _)| h.host.clone()));
    let roster = Roster { hosts, ring: ring_addrs };
    let welcome = serde_json::to_vec(&roster).map_err(|e| TrainError::Other(e.to_string()))?;
    let mut peers = Vec::new();
    for (hello, mut stream) in joined.into_iter().flatten() {
        write_frame(&mut stream, wire::WELCOME, &welcome)
            .map_err(|e| TrainError::Distributed(format!("rank {} left during the rendezvous: {e}", hello.rank)))?;
        let _ = stream.set_read_timeout(None);
        peers.push((hello.rank, format!("rank {} ({}, pid {})", hello.rank, hello.host, hello.pid), stream));
    }
    Ok((peers, roster))
}

fn join_rendezvous(
    env: &WorldEnv,
    identity: &Identity,
    token: &DistToken,
    ring: &TcpListener,
    deadline: Instant,
    timeout: Duration,
) -> Result<(Peers, Roster), TrainError> {
    let target = format!("{}:{}", env.master_addr, env.master_port);
    let mut stream = loop {
        let attempt = target
            .to_socket_addrs()
            .map_err(|e| TrainError::Distributed(format!("MASTER_ADDR {target} does not resolve: {e}")))?
            .find_map(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).ok());
        if let Some(s) = attempt {
            break s;
        }
        if Instant::now() > deadline {
            return Err(TrainError::Distributed(format!(
                "rank {} found no rank 0 at {target} within {} s: is rank 0 started, and MASTER_ADDR/MASTER_PORT right?",
                env.rank,
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let hello = Hello {
        rank: env.rank,
        world_size: env.world_size,
        identity: identity.clone(),
        host: hostname(),
        pid: std::process::id(),
        ring_port: ring.local_addr().map_err(|e| TrainError::Distributed(format!("ring socket: {e}")))?.port(),
    };
    let payload = serde_json::to_vec(&hello).map_err(|e| TrainError::Other(e.to_string()))?;
    token
        .send(&mut stream)
        .and_then(|()| write_frame(&mut stream, wire::HELLO, &payload))
        .map_err(|e| TrainError::Distributed(format!("rank 0 at {target} closed the rendezvous: {e}")))?;
    let _ = stream.set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(5)));
    match read_frame(&mut stream, wire::MAX_HANDSHAKE_FRAME, &|| ()) {
        Ok((wire::WELCOME, payload)) => {
            let _ = stream.set_read_timeout(None);
            let roster: Roster = serde_json::from_slice(&payload)
                .map_err(|e| TrainError::Distributed(format!("rank 0 sent an unreadable roster: {e}")))?;
            if roster.hosts.len() != env.world_size || roster.ring.len() != env.world_size {
                return Err(TrainError::Distributed("rank 0 sent a roster of another world size".into()));
            }
            Ok((vec![(0, format!("rank 0 ({target})"), stream)], roster))
        }
        Ok((wire::REJECT, why)) => Err(TrainError::Config(String::from_utf8_lossy(&why).into_owned())),
        Ok((kind, _)) => Err(TrainError::Distributed(format!("rank 0 answered the rendezvous with frame {kind}"))),
        Err(e) => Err(TrainError::Distributed(format!("rank 0 at {target} did not admit rank {}: {e}", env.rank))),
    }
}

fn refuse_all(joined: &mut [Option<(Hello, TcpStream)>], why: &str) {
    for (_, stream) in joined.iter_mut().flatten() {
        let _ = write_frame(stream, wire::REJECT, why.as_bytes());
    }
}

/// Rank 0 listens on the loopback address it is told, else on every interface (other
/// hosts reach it by its name or address).
fn bind_address(env: &WorldEnv) -> Result<SocketAddr, TrainError> {
    let named = format!("{}:{}", env.master_addr, env.master_port)
        .to_socket_addrs()
        .map_err(|e| TrainError::Distributed(format!("MASTER_ADDR {} does not resolve: {e}", env.master_addr)))?
        .next();
    Ok(match named {
        Some(a) if a.ip().is_loopback() => a,
        _ => SocketAddr::from(([0, 0, 0, 0], env.master_port)),
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::{all_reduce_host_f64, Collective};

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    fn env(rank: usize, world: usize, port: u16) -> WorldEnv {
        WorldEnv {
            rank,
            world_size: world,
            local_rank: Some(rank),
            local_world_size: Some(world),
            master_addr: "127.0.0.1".into(),
            master_port: port,
        }
    }

    fn id(seed: u64) -> Identity {
        Identity { binary: "b".repeat(64), preset: "p".repeat(64), seed, out: "runs/x".into() }
    }

    #[test]
    fn three_processes_worth_of_ranks_meet_and_reduce() {
        let port = free_port();
        let handles: Vec<_> = (0..3)
            .map(|r| {
                std::thread::spawn(move || {
                    let w = rendezvous(&env(r, 3, port), &id(1), Duration::from_secs(20)).unwrap();
                    let mut v = [r as f64, 1.0];
                    all_reduce_host_f64(&w, &mut v).unwrap();
                    let gathered = w.all_gather_bytes(&[r as u8; 2]).unwrap();
                    // A rank that leaves without the goodbye ends the run for the others
                    // (which may still be gathering).
                    w.finish().unwrap();
                    (v, gathered)
                })
            })
            .collect();
        for h in handles {
            let (v, gathered) = h.join().unwrap();
            assert_eq!(v, [3.0, 3.0]);
            assert_eq!(gathered, vec![vec![0, 0], vec![1, 1], vec![2, 2]]);
        }
    }

    #[test]
    fn a_rank_with_another_seed_fails_every_rank_with_one_message() {
        let port = free_port();
        let handles: Vec<_> = (0..2)
            .map(|r| {
                std::thread::spawn(move || {
                    rendezvous(&env(r, 2, port), &id(if r == 1 { 9 } else { 1 }), Duration::from_secs(20))
                        .err()
                        .map(|e| e.to_string())
                })
            })
            .collect();
        let errors: Vec<String> = handles.into_iter().map(|h| h.join().unwrap().expect("an error")).collect();
        assert!(errors[0].contains("rank 1 has seed 9 (rank 0 has 1)"), "{}", errors[0]);
        assert_eq!(errors[0], errors[1]);
    }

    #[test]
    fn a_rank_that_vanishes_ends_the_others_naming_it() {
        let port = free_port();
        let dead = std::thread::spawn(move || {
            let w = rendezvous(&env(1, 2, port), &id(1), Duration::from_secs(20)).unwrap();
            // Its sockets close without a goodbye, as under SIGKILL.
            w.vanish();
        });
        let w = rendezvous(&env(0, 2, port), &id(1), Duration::from_secs(20)).unwrap();
        let token = w.abort().token();
        dead.join().unwrap();
        let started = Instant::now();
        let err = w.all_gather_bytes(b"x").unwrap_err().to_string();
        assert!(err.contains("rank 1") && err.contains("died"), "{err}");
        assert!(token.is_cancelled());
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    /// Runs `work` on every rank of a world of `w` threads; returns each rank's result in rank order.
    fn on_ranks<T: Send + 'static>(w: usize, work: fn(&TcpWorld) -> T) -> Vec<T> {
        let port = free_port();
        let handles: Vec<_> = (0..w)
            .map(|r| {
                std::thread::spawn(move || {
                    let world = rendezvous(&env(r, w, port), &id(1), Duration::from_secs(30)).unwrap();
                    let out = work(&world);
                    world.finish().unwrap();
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn ring_collectives_send_about_2n_bytes_per_rank_and_agree_bit_for_bit() {
        use candle_core::{Device, Tensor};
        const N: usize = 1 << 16;
        for w in [2usize, 4, 8] {
            let results = on_ranks(w, |world| {
                let r = world.rank();
                // Values whose sums are exact in f32, so the result can be checked exactly.
                let mine: Vec<f32> = (0..N).map(|i| ((i * 7 + r * 13) % 101) as f32).collect();
                let t = Tensor::from_vec(mine, N, &Device::Cpu).unwrap();
                let before = world.bytes_sent();
                let sum = world.all_reduce_sum(&t).unwrap().to_vec1::<f32>().unwrap();
                let sent = world.bytes_sent() - before;
                let shard = world.reduce_scatter_sum(&t).unwrap().to_vec1::<f32>().unwrap();
                let gathered = world.all_gather(&Tensor::new(&[r as f32, -(r as f32)], &Device::Cpu).unwrap());
                (sum, sent, shard, gathered.unwrap().to_vec1::<f32>().unwrap())
            });
            let exact: Vec<f32> =
                (0..N).map(|i| (0..w).map(|r| ((i * 7 + r * 13) % 101) as f32).sum::<f32>()).collect();
            let bytes = (N * 4) as f64;
            for (r, (sum, sent, shard, gathered)) in results.iter().enumerate() {
                assert_eq!(sum, &exact, "rank {r} of {w}");
                // A ring all-reduce sends 2·(W−1)/W·N bytes from every rank (≈ 2N); the star sent (W−1)·W·N from
                // rank 0.
                let ideal = 2.0 * (w as f64 - 1.0) / w as f64 * bytes;
                let ratio = *sent as f64 / ideal;
                assert!((0.999..1.001).contains(&ratio), "rank {r} of {w} sent {sent} bytes, ideal {ideal}");
                assert!(*sent as f64 <= 2.0 * bytes, "rank {r} of {w} sent {sent} bytes for N = {bytes}");
                let c = N / w;
                assert_eq!(shard, &exact[r * c..(r + 1) * c].to_vec(), "rank {r} of {w}'s shard");
                let want: Vec<f32> = (0..w).flat_map(|q| [q as f32, -(q as f32)]).collect();
                assert_eq!(gathered, &want);
            }
            eprintln!(
                "W = {w}: every rank sent {} bytes for an all-reduce of {} bytes ({:.3} N)",
                results[0].1,
                N * 4,
                results[0].1 as f64 / bytes
            );
        }
    }

    #[test]
    fn the_roster_names_every_ranks_host_and_a_ring_of_two_works() {
        let hosts = on_ranks(2, |world| world.hosts().to_vec());
        assert_eq!(hosts[0], hosts[1]);
        assert_eq!(hosts[0].len(), 2);
        let mut e = env(1, 2, 0);
        (e.local_rank, e.local_world_size) = (None, None);
        e.place_on_hosts(&hosts[0]);
        assert_eq!((e.local_rank, e.local_world_size), (Some(1), Some(2)));
    }

    #[test]
    fn ranks_writing_to_different_out_folders_are_refused() {
        let port = free_port();
        let handles: Vec<_> = (0..2)
            .map(|r| {
                std::thread::spawn(move || {
                    let mut me = id(1);
                    me.out = format!("/runs/node{r}");
                    rendezvous(&env(r, 2, port), &me, Duration::from_secs(20)).err().map(|e| e.to_string())
                })
            })
            .collect();
        let errors: Vec<String> = handles.into_iter().map(|h| h.join().unwrap().expect("an error")).collect();
        assert!(errors[0].contains("rank 1 writes to --out \"/runs/node1\""), "{}", errors[0]);
    }
}
