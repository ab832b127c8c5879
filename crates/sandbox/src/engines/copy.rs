//! Copying an image from one engine to another (`docker save | docker load` over the two
//! APIs, streamed): how the engines of a pool get the images built on this host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;

use super::super::docker::Engine;
use super::super::error::{describe_bollard, SandboxError};

/// One copy of an image to an engine at a time; the others wait for it and find it there.
fn copy_lock(engine: &Engine, image: &str) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: Mutex<Option<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> = Mutex::new(None);
    let key = format!("{}\n{image}", engine.name());
    match LOCKS.lock() {
        Ok(mut m) => m.get_or_insert_with(HashMap::new).entry(key).or_default().clone(),
        Err(_) => Arc::new(tokio::sync::Mutex::new(())),
    }
}

/// Copies `image` from `from` to `to` unless `to` has it by then.
pub(crate) async fn copy_image(from: &Engine, to: &Engine, image: &str) -> Result<(), SandboxError> {
    let lock = copy_lock(to, image);
    let _one = lock.lock().await;
    if to.api().inspect_image(image).await.is_ok() {
        return Ok(());
    }
    tracing::info!("copying the image {image} from engine {} to engine {}", from.name(), to.name());
    let failed = |reason: String| SandboxError::Docker {
        action: format!("copy the image `{image}` from engine {} to engine {}", from.name(), to.name()),
        reason,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    let export_error: Arc<Mutex<Option<String>>> = Arc::default();
    let export = {
        let from = from.clone();
        let image = image.to_string();
        let export_error = export_error.clone();
        tokio::spawn(async move {
            let mut stream = from.api().export_image(&image);
            while let Some(chunk) = stream.next().await {
                match chunk {
                    Ok(b) => {
                        if tx.send(b).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        if let Ok(mut slot) = export_error.lock() {
                            *slot = Some(describe_bollard(&e));
                        }
                        return;
                    }
                }
            }
        })
    };
    let body = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
    let options = bollard::image::ImportImageOptions { quiet: true };
    let mut load = to.api().import_image_stream(options, body, None);
    let mut load_error = None;
    while let Some(item) = load.next().await {
        match item {
            Ok(info) => {
                if let Some(e) = info.error {
                    load_error = Some(e);
                }
            }
            Err(e) => load_error = Some(describe_bollard(&e)),
        }
    }
    let _ = export.await;
    if let Some(e) = export_error.lock().ok().and_then(|e| e.clone()) {
        return Err(failed(format!("reading it from {} failed: {e}", from.name())));
    }
    if let Some(e) = load_error {
        return Err(failed(e));
    }
    match to.api().inspect_image(image).await {
        Ok(_) => Ok(()),
        Err(e) => Err(failed(format!("the load ended without the image: {}", describe_bollard(&e)))),
    }
}
