//! Image references as Docker reads them: `[HOST[:PORT]/]PATH[:TAG][@DIGEST]`, where the
//! first component is a registry only when it looks like a host (a `.` or `:`, or
//! `localhost`). Task authors pin base images by digest and name them through registry
//! mirrors; the image map and the stand-ins match on what the reference names.

/// Where Docker's official images are mirrored under their own names.
const OFFICIAL_PREFIXES: &[&str] = &[
    "docker.io/library/",
    "index.docker.io/library/",
    "registry-1.docker.io/library/",
    "public.ecr.aws/docker/library/",
    "mirror.gcr.io/library/",
    "library/",
];

/// A parsed image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// `public.ecr.aws`, `localhost:5000`; none for Docker Hub names.
    pub registry: Option<String>,
    /// `docker/library/python`, `debian`.
    pub path: String,
    pub tag: Option<String>,
    /// `sha256:…`.
    pub digest: Option<String>,
}

impl ImageRef {
    /// Parses `reference`; `None` when it is not one (empty parts, upper case, spaces).
    pub fn parse(reference: &str) -> Option<ImageRef> {
        let (rest, digest) = match reference.split_once('@') {
            Some((r, d)) => {
                let (algo, hex) = d.split_once(':')?;
                if algo.is_empty() || hex.len() < 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return None;
                }
                (r, Some(d.to_string()))
            }
            None => (reference, None),
        };
        let (registry, remainder) = match rest.split_once('/') {
            Some((first, more)) if first.contains('.') || first.contains(':') || first == "localhost" => {
                // A registry's port is a number: `debian:bad/tag` is no reference.
                if first
                    .split_once(':')
                    .is_some_and(|(_, port)| port.is_empty() || !port.chars().all(|c| c.is_ascii_digit()))
                {
                    return None;
                }
                (Some(first.to_string()), more)
            }
            _ => (None, rest),
        };
        let last_slash = remainder.rfind('/').map_or(0, |i| i + 1);
        let (path, tag) = match remainder[last_slash..].rsplit_once(':') {
            Some((_, t)) => (&remainder[..remainder.len() - t.len() - 1], Some(t.to_string())),
            None => (remainder, None),
        };
        let path_ok = !path.is_empty()
            && path.split('/').all(|c| {
                !c.is_empty()
                    && c.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch))
            });
        let tag_ok = tag.as_deref().is_none_or(|t| {
            !t.is_empty() && t.len() <= 128 && t.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        });
        (path_ok && tag_ok).then(|| ImageRef { registry, path: path.to_string(), tag, digest })
    }

    /// The repository: registry and path (`public.ecr.aws/docker/library/python`).
    pub fn repository(&self) -> String {
        match &self.registry {
            Some(r) => format!("{r}/{}", self.path),
            None => self.path.clone(),
        }
    }

    /// The reference without its digest (`python:3.13-slim-bookworm`); the tag is kept.
    pub fn without_digest(&self) -> String {
        match &self.tag {
            Some(t) => format!("{}:{t}", self.repository()),
            None => self.repository(),
        }
    }

    /// The official image a mirror carries under its own name (`public.ecr.aws/docker/
    /// library/python:3.13` → `python:3.13`), without the digest.
    pub fn official(&self) -> Option<String> {
        let plain = self.without_digest();
        OFFICIAL_PREFIXES
            .iter()
            .find_map(|p| plain.strip_prefix(p))
            .filter(|rest| !rest.contains('/'))
            .map(str::to_string)
    }

    /// The names the image map and the stand-ins are matched against, most specific
    /// first: as written, without the digest, the official name behind a mirror.
    pub fn match_names(reference: &str) -> Vec<String> {
        let mut names = vec![reference.to_string()];
        if let Some(r) = ImageRef::parse(reference) {
            for n in [Some(r.without_digest()), r.official()].into_iter().flatten() {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:4724b8cc51e33e398f0e2e15e18d5ec2851ff0c2280647e1310bc1642182655d";

    #[test]
    fn references_parse_as_docker_parses_them() {
        let r = ImageRef::parse(&format!("public.ecr.aws/docker/library/debian:bookworm-slim@{DIGEST}")).unwrap();
        assert_eq!(r.registry.as_deref(), Some("public.ecr.aws"));
        assert_eq!(r.path, "docker/library/debian");
        assert_eq!(r.tag.as_deref(), Some("bookworm-slim"));
        assert_eq!(r.digest.as_deref(), Some(DIGEST));
        assert_eq!(r.without_digest(), "public.ecr.aws/docker/library/debian:bookworm-slim");
        assert_eq!(r.official().as_deref(), Some("debian:bookworm-slim"));

        let r = ImageRef::parse("localhost:5000/team/img").unwrap();
        assert_eq!(
            (r.registry.as_deref(), r.path.as_str(), r.tag.as_deref()),
            (Some("localhost:5000"), "team/img", None)
        );
        let r = ImageRef::parse("localhost:5000/img:v2").unwrap();
        assert_eq!((r.path.as_str(), r.tag.as_deref()), ("img", Some("v2")));
        let r = ImageRef::parse(&format!("python@{DIGEST}")).unwrap();
        assert_eq!((r.registry, r.tag, r.digest.is_some()), (None, None, true));
        let r = ImageRef::parse("ghcr.io/laude-institute/t-bench/python-3-13:20250620").unwrap();
        assert_eq!(r.official(), None);
        assert_eq!(ImageRef::parse("library/python:3.13").unwrap().official().as_deref(), Some("python:3.13"));
        assert_eq!(
            ImageRef::parse("docker.io/library/python:3.13").unwrap().official().as_deref(),
            Some("python:3.13")
        );

        for bad in ["", "Python:3", "a b", "x@sha256:zz", "x:", "/x", "x//y", "debian:bad/tag"] {
            assert!(ImageRef::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn match_names_go_from_the_written_reference_to_the_official_name() {
        let names = ImageRef::match_names(&format!("mirror.gcr.io/library/python:3.12-slim-bookworm@{DIGEST}"));
        assert_eq!(
            names,
            vec![
                format!("mirror.gcr.io/library/python:3.12-slim-bookworm@{DIGEST}"),
                "mirror.gcr.io/library/python:3.12-slim-bookworm".to_string(),
                "python:3.12-slim-bookworm".to_string()
            ]
        );
        assert_eq!(ImageRef::match_names("debian:bookworm"), vec!["debian:bookworm".to_string()]);
    }
}
