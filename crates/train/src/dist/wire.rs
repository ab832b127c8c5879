//! Frames on the ranks' TCP connections: a kind byte, a little-endian u64 length, the payload.

use std::io::{self, Read, Write};

/// A rank introduces itself (JSON [`super::rendezvous`] hello).
pub const HELLO: u8 = 1;
/// Rank 0 admits a rank into the world.
pub const WELCOME: u8 = 2;
/// Rank 0 refuses the world; the payload says why.
pub const REJECT: u8 = 3;
/// A collective's payload.
pub const DATA: u8 = 4;
/// "Still alive", sent every second.
pub const HEARTBEAT: u8 = 5;
/// The run is over on every rank; the payload says why.
pub const ABORT: u8 = 6;
/// The sender is leaving normally; the connection closing next is not a death.
pub const BYE: u8 = 7;
/// A rank opens its ring connection to the next one; the payload is its rank (u64).
pub const RING: u8 = 8;

/// Larger frames are a corrupt stream, not data.
const MAX_FRAME: u64 = 64 << 30;
/// Payloads are read in pieces of this size so that progress counts as a sign of life.
const PIECE: usize = 1 << 20;

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, kind: u8, payload: &[u8]) -> io::Result<()> {
    let mut header = [0u8; 9];
    header[0] = kind;
    header[1..].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    w.write_all(&header)?;
    w.write_all(payload)?;
    w.flush()
}

/// Reads one frame; `progress` is called as the payload arrives.
pub fn read_frame(r: &mut impl Read, progress: &dyn Fn()) -> io::Result<(u8, Vec<u8>)> {
    let mut header = [0u8; 9];
    r.read_exact(&mut header)?;
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&header[1..]);
    let len = u64::from_le_bytes(len_bytes);
    if len > MAX_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a frame of {len} bytes: not a rank's stream")));
    }
    let len = len as usize;
    let mut payload = vec![0u8; len];
    let mut at = 0;
    while at < len {
        let end = (at + PIECE).min(len);
        r.read_exact(&mut payload[at..end])?;
        at = end;
        progress();
    }
    Ok((header[0], payload))
}

/// A list of byte strings as one payload.
pub fn encode_list(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + parts.iter().map(|p| p.len() + 8).sum::<usize>());
    out.extend((parts.len() as u64).to_le_bytes());
    for p in parts {
        out.extend((p.len() as u64).to_le_bytes());
        out.extend(p);
    }
    out
}

/// The inverse of [`encode_list`].
pub fn decode_list(mut b: &[u8]) -> io::Result<Vec<Vec<u8>>> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "a truncated list from rank 0");
    let take = |n: usize, b: &mut &[u8]| -> io::Result<Vec<u8>> {
        if b.len() < n {
            return Err(bad());
        }
        let (head, rest) = b.split_at(n);
        *b = rest;
        Ok(head.to_vec())
    };
    let count = u64::from_le_bytes(take(8, &mut b)?.try_into().map_err(|_| bad())?) as usize;
    let mut out = Vec::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        let n = u64::from_le_bytes(take(8, &mut b)?.try_into().map_err(|_| bad())?) as usize;
        out.push(take(n, &mut b)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_lists_round_trip() {
        let mut buf = Vec::new();
        write_frame(&mut buf, DATA, &encode_list(&[vec![1, 2], vec![], vec![3; 3 << 20]])).unwrap();
        write_frame(&mut buf, BYE, &[]).unwrap();
        let mut r = buf.as_slice();
        let pieces = std::cell::Cell::new(0);
        let (kind, payload) = read_frame(&mut r, &|| pieces.set(pieces.get() + 1)).unwrap();
        assert_eq!(kind, DATA);
        assert!(pieces.get() >= 3, "progress was not reported while reading");
        assert_eq!(decode_list(&payload).unwrap(), vec![vec![1, 2], vec![], vec![3; 3 << 20]]);
        assert_eq!(read_frame(&mut r, &|| ()).unwrap(), (BYE, vec![]));
        assert!(read_frame(&mut r, &|| ()).is_err());
        assert!(decode_list(&[5, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }
}
