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
/// The first frame on every connection: the SHA-256 of the run's shared token.
pub const TOKEN: u8 = 9;
/// A piece of a collective's payload that goes on in the next frame (the last piece is
/// a [`DATA`] frame).
pub const DATA_MORE: u8 = 10;

/// The largest frame a rank sends once admitted: collectives' payloads (a ring step of
/// ZeRO-0 carries a share of every gradient, gigabytes for a full fine-tune) go in pieces
/// of at most this size, so a frame's announced length never has to be believed beyond it.
pub const MAX_FRAME: u64 = 256 << 20;
/// The largest frame before a peer is admitted (its token, its introduction, rank 0's
/// roster of every rank's host and ring address): a few hundred bytes per rank.
pub const MAX_HANDSHAKE_FRAME: u64 = 1 << 20;
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

/// Writes a collective's payload as [`DATA_MORE`] frames of at most [`MAX_FRAME`] bytes
/// and a final [`DATA`] frame.
pub fn write_message(w: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    write_message_in(w, payload, MAX_FRAME as usize)
}

fn write_message_in(w: &mut impl Write, payload: &[u8], piece: usize) -> io::Result<()> {
    let mut rest = payload;
    while rest.len() > piece {
        let (head, tail) = rest.split_at(piece);
        write_frame(w, DATA_MORE, head)?;
        rest = tail;
    }
    write_frame(w, DATA, rest)
}

/// Joins the pieces [`write_message`] sent back into one payload.
#[derive(Debug, Default)]
pub struct Reassembly {
    pending: Vec<u8>,
}

impl Reassembly {
    /// Takes a [`DATA_MORE`] or [`DATA`] frame's payload; the whole payload once the last
    /// piece is in.
    pub fn push(&mut self, kind: u8, payload: Vec<u8>) -> Option<Vec<u8>> {
        match kind {
            DATA_MORE => {
                self.pending.extend_from_slice(&payload);
                None
            }
            _ if self.pending.is_empty() => Some(payload),
            _ => {
                self.pending.extend_from_slice(&payload);
                Some(std::mem::take(&mut self.pending))
            }
        }
    }
}

/// Reads one frame of at most `max` payload bytes; `progress` is called as the payload
/// arrives. A longer announced length is refused before anything is allocated for it,
/// and the buffer grows only as bytes arrive.
pub fn read_frame(r: &mut impl Read, max: u64, progress: &dyn Fn()) -> io::Result<(u8, Vec<u8>)> {
    let mut header = [0u8; 9];
    r.read_exact(&mut header)?;
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&header[1..]);
    let len = u64::from_le_bytes(len_bytes);
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame announcing {len} bytes, over the {max}-byte limit: not a rank's stream"),
        ));
    }
    let len = usize::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a frame too large"))?;
    let mut payload = Vec::with_capacity(len.min(PIECE));
    while payload.len() < len {
        let at = payload.len();
        payload.resize((at + PIECE).min(len), 0);
        r.read_exact(&mut payload[at..])?;
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
        let (kind, payload) = read_frame(&mut r, MAX_FRAME, &|| pieces.set(pieces.get() + 1)).unwrap();
        assert_eq!(kind, DATA);
        assert!(pieces.get() >= 3, "progress was not reported while reading");
        assert_eq!(decode_list(&payload).unwrap(), vec![vec![1, 2], vec![], vec![3; 3 << 20]]);
        assert_eq!(read_frame(&mut r, MAX_FRAME, &|| ()).unwrap(), (BYE, vec![]));
        assert!(read_frame(&mut r, MAX_FRAME, &|| ()).is_err());
        assert!(decode_list(&[5, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }

    /// A reader that counts what was read from it and ends after the header: a payload
    /// read would fail with end-of-file, not with the limit.
    struct Header(std::io::Cursor<Vec<u8>>, usize);

    impl Read for Header {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.read(buf)?;
            self.1 += n;
            Ok(n)
        }
    }

    #[test]
    fn a_header_announcing_64_gib_is_refused_before_any_payload_is_read_or_allocated() {
        let mut header = vec![HELLO];
        header.extend((64u64 << 30).to_le_bytes());
        let mut r = Header(std::io::Cursor::new(header), 0);
        let err = read_frame(&mut r, MAX_HANDSHAKE_FRAME, &|| panic!("no payload may be read")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("68719476736 bytes, over the 1048576-byte limit"), "{err}");
        assert_eq!(r.1, 9, "only the header was read");
        // The admitted ranks' limit refuses it as well.
        let mut header = vec![DATA];
        header.extend((64u64 << 30).to_le_bytes());
        assert!(read_frame(&mut header.as_slice(), MAX_FRAME, &|| ()).unwrap_err().to_string().contains("limit"));
    }

    #[test]
    fn a_payload_larger_than_a_frame_goes_in_pieces_and_comes_back_whole() {
        let payload: Vec<u8> = (0..10u8).collect();
        let mut buf = Vec::new();
        write_message_in(&mut buf, &payload, 4).unwrap();
        write_message_in(&mut buf, &[], 4).unwrap();
        let mut r = buf.as_slice();
        let mut kinds = Vec::new();
        let mut joined = Reassembly::default();
        let mut whole = Vec::new();
        while let Ok((kind, piece)) = read_frame(&mut r, 4, &|| ()) {
            kinds.push(kind);
            whole.extend(joined.push(kind, piece));
        }
        assert_eq!(kinds, [DATA_MORE, DATA_MORE, DATA, DATA]);
        assert_eq!(whole, vec![payload, vec![]]);
    }
}
