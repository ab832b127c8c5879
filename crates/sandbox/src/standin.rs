//! Built-in stand-ins for the Terminal-Bench base images, for hosts that cannot pull
//! them. Each is built locally from a debootstrapped Debian base, as close to the
//! image it replaces as Debian's mirror allows.

use super::build::{build_from_dockerfile, BuildEnv};
use super::docker::Engine;
use super::error::SandboxError;
use super::image::{build_base_image, glob_match, image_exists, BaseImageOptions, BASE_IMAGE};
use super::reference::ImageRef;

/// Tag of the Debian trixie base image, which stands in for Ubuntu 24.04.
pub const TRIXIE_BASE_IMAGE: &str = "agent-base:trixie";

/// A built-in stand-in for an image that cannot be pulled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standin {
    /// Images it stands in for (`*` matches any run of characters).
    pub pattern: &'static str,
    /// Its local tag.
    pub tag: &'static str,
    /// What it is, for notices and results.
    pub description: &'static str,
    /// The Debian base it is built from: image and suite (built first when missing).
    pub base: (&'static str, &'static str),
    /// Its Dockerfile (`{base}` stands for the base image).
    dockerfile: &'static str,
}

/// CPython 3.13 from the upstream source Debian ships (the `python3.13` source
/// package's original tarball), built into `/usr/local` on bookworm exactly as the
/// official `python:3.13-slim-bookworm` image builds it, which Terminal-Bench's image
/// starts from: the tasks' `apt-get install` lines name bookworm's packages, and their
/// scripts expect `/usr/local/bin/python3` and `/usr/local/lib/python3.13/site-packages`.
/// The base's Debian Python is removed: the official image has none, and a task that
/// breaks the image's pip must stay broken.
const PYTHON_313: &str = r#"FROM {base} AS cpython
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends build-essential pkg-config libssl-dev zlib1g-dev libbz2-dev libreadline-dev libsqlite3-dev libncursesw5-dev libffi-dev liblzma-dev uuid-dev libgdbm-dev libexpat1-dev xz-utils
RUN echo 'deb-src http://deb.debian.org/debian trixie main' > /etc/apt/sources.list.d/trixie-src.list \
 && apt-get update && mkdir /src && cd /src && apt-get source --download-only python3.13 \
 && tar xf python3.13_*.orig.tar.xz && cd Python-3.13* \
 && ./configure --prefix=/usr/local --enable-shared --with-ensurepip=install LDFLAGS=-Wl,-rpath,/usr/local/lib >/dev/null \
 && make -j"$(nproc)" >/dev/null && make install >/dev/null \
 && cd /usr/local/bin && ln -s python3 python && ln -s pip3 pip \
 && find /usr/local -depth -type d -name __pycache__ -exec rm -rf {} +
FROM {base}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libssl3 zlib1g libbz2-1.0 libreadline8 libsqlite3-0 libncursesw6 libffi8 liblzma5 libuuid1 libgdbm6 libexpat1 \
 && DEBIAN_FRONTEND=noninteractive apt-get purge -y --auto-remove $(dpkg-query -W -f '${Package}\n' | grep -E '^(python3|python-is-python3|libpython3)') \
 && rm -rf /var/lib/apt/lists/*
COPY --from=cpython /usr/local /usr/local
ENV PIP_BREAK_SYSTEM_PACKAGES=1
WORKDIR /app
"#;

const PLAIN: &str = "FROM {base}\nENV PIP_BREAK_SYSTEM_PACKAGES=1\nWORKDIR /app\n";

/// Python 3.11 is bookworm's own (3.11.2): its pip and venv added, pip allowed to install
/// into it as in the official `python:3.11-slim` (no `EXTERNALLY-MANAGED`), and `python`
/// and `pip` on the PATH. Tasks pin wheels built for 3.11 only (numpy 1.23, say), which
/// the 3.13 stand-in cannot install.
const PYTHON_311: &str = r#"FROM {base}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-pip python3-venv \
 && rm -rf /var/lib/apt/lists/* && rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED \
 && ln -sf /usr/bin/python3 /usr/local/bin/python && ln -sf /usr/bin/pip3 /usr/local/bin/pip
ENV PIP_BREAK_SYSTEM_PACKAGES=1
WORKDIR /app
"#;

/// Built-in stand-ins for Terminal-Bench base images and the official images tasks start
/// from (matched also behind their mirrors and digests, see [`ImageRef::match_names`]).
/// Ubuntu 24.04 has no Debian twin; trixie is the nearest (its 64-bit-time package names,
/// glibc and GCC generation). A stand-in without a Dockerfile is its Debian base itself.
const TB_STANDINS: &[Standin] = &[
    Standin {
        pattern: "ghcr.io/laude-institute/t-bench/python-3-13:*",
        tag: "agent-tb-python-3-13:cpython-bookworm",
        description: "Debian bookworm with CPython 3.13 built into /usr/local, as python:3.13-slim-bookworm, plus tmux, WORKDIR /app",
        base: (BASE_IMAGE, "bookworm"),
        dockerfile: PYTHON_313,
    },
    Standin {
        pattern: "ghcr.io/laude-institute/t-bench/ubuntu-24-04:*",
        tag: "agent-tb-ubuntu-24-04:trixie",
        description: "Debian trixie (not Ubuntu) with its Python 3.13, tmux, WORKDIR /app",
        base: (TRIXIE_BASE_IMAGE, "trixie"),
        dockerfile: PLAIN,
    },
    Standin {
        pattern: "python:3.11*",
        tag: "agent-tb-python-3-11:bookworm",
        description: "Debian bookworm with its own CPython 3.11 (3.11.2), pip and venv, as python:3.11-slim, WORKDIR /app",
        base: (BASE_IMAGE, "bookworm"),
        dockerfile: PYTHON_311,
    },
    Standin {
        pattern: "python:3.1*-slim*",
        tag: "agent-tb-python-3-13:cpython-bookworm",
        description: "Debian bookworm with CPython 3.13 built into /usr/local, as python:3.13-slim-bookworm (3.13 for any 3.1x), plus tmux, WORKDIR /app",
        base: (BASE_IMAGE, "bookworm"),
        dockerfile: PYTHON_313,
    },
    Standin {
        pattern: "debian:bookworm*",
        tag: BASE_IMAGE,
        description: "Debian bookworm, debootstrapped here (minbase plus the sandbox's tools)",
        base: (BASE_IMAGE, "bookworm"),
        dockerfile: "",
    },
    Standin {
        pattern: "debian:trixie*",
        tag: TRIXIE_BASE_IMAGE,
        description: "Debian trixie, debootstrapped here (minbase plus the sandbox's tools)",
        base: (TRIXIE_BASE_IMAGE, "trixie"),
        dockerfile: "",
    },
];

/// Every built-in stand-in, for `agent sandbox standins --list`.
pub fn standins() -> &'static [Standin] {
    TB_STANDINS
}

/// The built-in stand-in for `image`, if there is one (matched as written, without its
/// digest, then as the official image behind a mirror).
pub fn standin_for(image: &str) -> Option<&'static Standin> {
    ImageRef::match_names(image).iter().find_map(|name| TB_STANDINS.iter().find(|s| glob_match(s.pattern, name)))
}

/// Builds every built-in stand-in that is missing (and the bases they need); returns
/// the tags built.
pub async fn build_standins(
    docker: &Engine,
    env: &BuildEnv,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Vec<String>, SandboxError> {
    let mut built = Vec::new();
    let mut seen = Vec::new();
    for s in TB_STANDINS {
        // Aliases share a tag; the bases are built by `agent sandbox base`.
        if s.dockerfile.is_empty() || seen.contains(&s.tag) {
            continue;
        }
        seen.push(s.tag);
        if image_exists(docker, s.tag).await? {
            progress(&format!("{} exists", s.tag));
            continue;
        }
        progress(&format!("building {} ({}) ...", s.tag, s.description));
        build_standin(docker, s, env).await?;
        built.push(s.tag.to_string());
    }
    Ok(built)
}

/// Builds a stand-in when missing, and its Debian base first when that is missing
/// (debootstrap, a few minutes, once).
pub(crate) async fn build_standin(docker: &Engine, standin: &Standin, env: &BuildEnv) -> Result<(), SandboxError> {
    // Trials resolve images concurrently; one build of each stand-in is enough.
    static BUILDS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = BUILDS.lock().await;
    if image_exists(docker, standin.tag).await? {
        return Ok(());
    }
    let (base, suite) = standin.base;
    if !image_exists(docker, base).await? {
        tracing::info!("building {base} for the stand-in {} (debootstrap {suite}, a few minutes, once)", standin.tag);
        let opts = BaseImageOptions { tag: base.into(), suite: suite.into(), ..Default::default() };
        build_base_image(docker, &opts, &mut |line| tracing::info!("{line}")).await.map_err(|e| {
            SandboxError::ImageMissing {
                image: base.into(),
                hint: format!(
                    "the stand-in {} starts from it and it could not be built ({e}); run `agent sandbox base --suite {suite}`",
                    standin.tag
                ),
            }
        })?;
    }
    if standin.dockerfile.is_empty() {
        return Ok(());
    }
    build_from_dockerfile(docker, standin.tag, &standin.dockerfile.replace("{base}", base), env).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_bench_images_have_stand_ins() {
        let py = standin_for("ghcr.io/laude-institute/t-bench/python-3-13:20250620").unwrap();
        assert_eq!(py.base.0, BASE_IMAGE);
        assert!(py.dockerfile.contains("python3.13") && py.dockerfile.contains("--prefix=/usr/local"));
        assert!(py.dockerfile.contains("purge"), "Debian's own Python goes");
        let ubuntu = standin_for("ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624").unwrap();
        assert_eq!(ubuntu.base, (TRIXIE_BASE_IMAGE, "trixie"));
        assert!(standin_for("ubuntu:24.04").is_none());
        // 3.11 is bookworm's own; the other 3.1x stand in as 3.13.
        for image in ["python:3.11-slim", "python:3.11", "docker.io/library/python:3.11.9-slim-bookworm"] {
            assert_eq!(standin_for(image).map(|s| s.tag), Some("agent-tb-python-3-11:bookworm"), "{image}");
        }
        assert_eq!(standin_for("python:3.12-slim").map(|s| s.tag), Some("agent-tb-python-3-13:cpython-bookworm"));
    }

    #[test]
    fn official_images_are_recognised_behind_mirrors_and_digests() {
        let digest = "sha256:4724b8cc51e33e398f0e2e15e18d5ec2851ff0c2280647e1310bc1642182655d";
        for (image, tag) in [
            (format!("public.ecr.aws/docker/library/debian:bookworm-slim@{digest}"), BASE_IMAGE),
            ("docker.io/library/debian:bookworm".to_string(), BASE_IMAGE),
            ("mirror.gcr.io/library/debian:trixie-slim".to_string(), TRIXIE_BASE_IMAGE),
            ("library/python:3.12-slim-bookworm".to_string(), "agent-tb-python-3-13:cpython-bookworm"),
            (
                format!("public.ecr.aws/docker/library/python:3.13-slim-bookworm@{digest}"),
                "agent-tb-python-3-13:cpython-bookworm",
            ),
        ] {
            assert_eq!(standin_for(&image).map(|s| s.tag), Some(tag), "{image}");
        }
        assert!(standin_for("ghcr.io/elsewhere/debian:bookworm").is_none(), "not a mirror of the official image");
    }
}
