//! The engine's classic builder, for engines without BuildKit.

use bollard::image::BuildImageOptions;
use futures_util::StreamExt;

use super::super::docker::Engine;
use super::super::error::describe_bollard;
use super::super::output::sanitize;
use super::buildkit::Request;
use super::BuildFailure;

/// Runs one classic build, logging its output.
pub(crate) async fn build(
    docker: &Engine,
    req: Request<'_>,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<(), BuildFailure> {
    let opts = BuildImageOptions::<String> {
        dockerfile: req.dockerfile.into(),
        t: req.tag.into(),
        rm: true,
        forcerm: true,
        labels: req.labels.clone(),
        extrahosts: (!req.extra_hosts.is_empty()).then(|| req.extra_hosts.join(",")),
        ..Default::default()
    };
    let mut stream = docker.api().build_image(opts, None, Some(req.context.into()));
    let mut recent: Vec<String> = Vec::new();
    let failure = |message: String, recent: &[String]| BuildFailure {
        message,
        step_errors: Vec::new(),
        recent_output: recent.to_vec(),
    };
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                if let Some(s) = info.stream.as_deref() {
                    let clean = sanitize(s.as_bytes());
                    for line in clean.lines().filter(|l| !l.trim().is_empty()) {
                        log(line);
                        recent.push(line.to_string());
                        if recent.len() > 8 {
                            recent.remove(0);
                        }
                    }
                }
                if let Some(err) = info.error {
                    return Err(failure(err, &recent));
                }
            }
            Err(e) => return Err(failure(describe_bollard(&e), &recent)),
        }
    }
    Ok(())
}
