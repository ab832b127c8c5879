//! What is wrong with a GGUF file that llama.cpp refused: its header (magic, version),
//! its metadata, and whether its tensor data fits in the file (a truncated download).
//! llama.cpp itself only says "null result from llama cpp".

use std::io::{BufReader, Read, Seek};
use std::path::Path;

/// The GGUF magic, `GGUF` in little-endian order.
const MAGIC: &[u8; 4] = b"GGUF";
/// More metadata entries or tensors than any real model has: the header is garbage.
const MAX_ITEMS: u64 = 1 << 24;

/// Bytes per block and elements per block of a ggml type (`None`: not known here).
fn type_size(t: u32) -> Option<(u64, u64)> {
    Some(match t {
        0 => (4, 1),
        1 | 30 => (2, 1),
        2 => (18, 32),
        3 => (20, 32),
        6 => (22, 32),
        7 => (24, 32),
        8 => (34, 32),
        9 => (36, 32),
        10 => (84, 256),
        11 => (110, 256),
        12 => (144, 256),
        13 => (176, 256),
        14 => (210, 256),
        15 => (292, 256),
        16 => (66, 256),
        17 => (74, 256),
        18 => (98, 256),
        19 => (50, 256),
        20 => (18, 32),
        21 => (110, 256),
        22 => (82, 256),
        23 => (136, 256),
        24 => (1, 1),
        25 => (2, 1),
        26 => (4, 1),
        27 | 28 => (8, 1),
        29 => (56, 256),
        _ => return None,
    })
}

struct Reader<R> {
    inner: R,
}

impl<R: Read> Reader<R> {
    fn bytes<const N: usize>(&mut self) -> std::io::Result<[u8; N]> {
        let mut b = [0u8; N];
        self.inner.read_exact(&mut b)?;
        Ok(b)
    }
    fn u32(&mut self) -> std::io::Result<u32> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }
    fn u64(&mut self) -> std::io::Result<u64> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }
    fn skip(&mut self, n: u64) -> std::io::Result<()> {
        let copied = std::io::copy(&mut (&mut self.inner).take(n), &mut std::io::sink())?;
        if copied == n {
            Ok(())
        } else {
            Err(std::io::ErrorKind::UnexpectedEof.into())
        }
    }
    fn string(&mut self) -> std::io::Result<String> {
        let n = self.u64()?;
        if n > 1 << 20 {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "a string longer than 1 MiB"));
        }
        let mut b = vec![0u8; n as usize];
        self.inner.read_exact(&mut b)?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }
    /// Skips a metadata value of `kind`, returning it when it is an unsigned integer.
    fn value(&mut self, kind: u32) -> std::io::Result<Option<u64>> {
        let fixed = |k: u32| match k {
            0 | 1 | 7 => Some(1),
            2 | 3 => Some(2),
            4..=6 => Some(4),
            10..=12 => Some(8),
            _ => None,
        };
        match kind {
            4 => return Ok(Some(u64::from(self.u32()?))),
            10 => return Ok(Some(self.u64()?)),
            8 => {
                self.string()?;
            }
            9 => {
                let (inner, n) = (self.u32()?, self.u64()?);
                if n > MAX_ITEMS * 64 {
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "an array too long"));
                }
                match fixed(inner) {
                    Some(size) => self.skip(size * n)?,
                    None => {
                        for _ in 0..n {
                            self.value(inner)?;
                        }
                    }
                }
            }
            k => match fixed(k) {
                Some(size) => self.skip(size)?,
                None => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("value type {k}"))),
            },
        }
        Ok(None)
    }
}

/// A sentence saying what is wrong with the GGUF file at `path`, or `None` when its
/// header, metadata and tensor table are sound and its data fits (then the fault lies
/// elsewhere: an architecture llama.cpp does not know, memory).
pub fn gguf_problem(path: &Path) -> Option<String> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return Some(format!("the file cannot be opened: {e}")),
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut r = Reader { inner: BufReader::new(file) };
    let truncated = |what: &str| {
        Some(format!("the file ends inside its {what} ({size} bytes): it is truncated (an interrupted download?)"))
    };
    let Ok(magic) = r.bytes::<4>() else { return truncated("header") };
    if &magic != MAGIC {
        return Some(format!(
            "it does not start with the GGUF magic (found {:02x?}): it is not a GGUF file (a safetensors or HTML file?)",
            magic
        ));
    }
    let Ok(version) = r.u32() else { return truncated("header") };
    if !(2..=3).contains(&version) {
        return Some(format!("it is GGUF version {version}; llama.cpp reads versions 2 and 3"));
    }
    let (Ok(tensors), Ok(kvs)) = (r.u64(), r.u64()) else { return truncated("header") };
    if tensors > MAX_ITEMS || kvs > MAX_ITEMS {
        return Some(format!("its header claims {tensors} tensors and {kvs} metadata entries: the header is corrupt"));
    }
    let mut alignment = 32u64;
    for _ in 0..kvs {
        let Ok(key) = r.string() else { return truncated("metadata") };
        let Ok(kind) = r.u32() else { return truncated("metadata") };
        match r.value(kind) {
            Ok(Some(v)) if key == "general.alignment" && v > 0 => alignment = v,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return truncated("metadata"),
            Err(e) => return Some(format!("its metadata entry `{key}` is corrupt ({e})")),
        }
    }
    let mut data_end = 0u64;
    for _ in 0..tensors {
        let Ok(name) = r.string() else { return truncated("tensor table") };
        let Ok(dims) = r.u32() else { return truncated("tensor table") };
        if dims > 8 {
            return Some(format!("the tensor `{name}` claims {dims} dimensions: the tensor table is corrupt"));
        }
        let mut elements = 1u64;
        for _ in 0..dims {
            let Ok(d) = r.u64() else { return truncated("tensor table") };
            elements = elements.saturating_mul(d);
        }
        let (Ok(kind), Ok(offset)) = (r.u32(), r.u64()) else { return truncated("tensor table") };
        if let Some((bytes, block)) = type_size(kind) {
            data_end = data_end.max(offset.saturating_add(elements.div_ceil(block).saturating_mul(bytes)));
        }
    }
    let Ok(table_end) = r.inner.stream_position() else { return None };
    let data_start = table_end.div_ceil(alignment) * alignment;
    let needed = data_start.saturating_add(data_end);
    if needed > size {
        return Some(format!(
            "its tensors need {needed} bytes but the file has {size}: it is truncated ({} bytes missing; an interrupted download?)",
            needed - size
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(tensors: u64, kvs: u64) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(tensors.to_le_bytes());
        b.extend(kvs.to_le_bytes());
        b
    }

    fn tensor(b: &mut Vec<u8>, name: &str, dims: &[u64], kind: u32, offset: u64) {
        b.extend((name.len() as u64).to_le_bytes());
        b.extend(name.as_bytes());
        b.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            b.extend(d.to_le_bytes());
        }
        b.extend(kind.to_le_bytes());
        b.extend(offset.to_le_bytes());
    }

    #[test]
    fn names_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        assert!(gguf_problem(&write("html", b"<!DOCTYPE html>")).unwrap().contains("not a GGUF file"));
        assert!(gguf_problem(&write("short", b"GGUF\x03")).unwrap().contains("truncated"));
        // One f32 tensor of 64 elements (256 bytes) after the table.
        let mut b = header(1, 0);
        tensor(&mut b, "w", &[8, 8], 0, 0);
        let start = b.len().div_ceil(32) * 32;
        b.resize(start + 256, 0);
        assert_eq!(gguf_problem(&write("ok", &b)), None);
        b.truncate(start + 100);
        let why = gguf_problem(&write("cut", &b)).unwrap();
        assert!(why.contains("156 bytes missing"), "{why}");
    }
}
