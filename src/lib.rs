//! `agent`'s binary crate: the CLI (in `main.rs`) and [`serve`], the OpenAI-compatible
//! server over any model backend. The agent itself lives in the workspace's crates: see
//! `docs/ARCHITECTURE.md` for the map.

pub mod serve;
