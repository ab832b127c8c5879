//! Skills with a scripted model and a real sandbox: a project's Claude-format skill is
//! listed in the system prompt, its body loaded by the `skill` tool and its script run in
//! the sandbox (the file it writes appears in the workspace, nothing runs on this
//! computer); a user's skill is mounted read-only.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_core::config::Config;
use agent_core::episode::{build_episode, ContainerSource, EpisodeRequest, ImageContainer};
use agent_core::skills::{discover, discover_project, SkillRoot, SkillSource};
use agent_llm::ScriptedBackend;
use agent_protocol::{EndReason, Event, Op};

use crate::support::{self, observations};

const SKILL: &str = "---\nname: stamp\ndescription: Stamp the workspace with where it ran. Use when asked to stamp.\nallowed-tools: Bash(bash:*)\n---\n\n# Stamp\n\nRun `scripts/stamp.sh` from this skill's folder.\n";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_skill_is_listed_loaded_and_its_script_runs_in_the_sandbox() {
    let engine = support::docker().await;
    let ws = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    // What the script touches outside the workspace must not appear on this computer.
    let marker = format!("/tmp/agent-skill-marker-{}", uuid::Uuid::new_v4().simple());
    write(&ws.path().join(".claude/skills/stamp/SKILL.md"), SKILL);
    write(
        &ws.path().join(".claude/skills/stamp/scripts/stamp.sh"),
        &format!("touch {marker}\nprintf 'stamped in %s\\n' \"$(cat /proc/1/comm)-$(hostname)\" > /workspace/stamp.txt\necho stamp-ok\n"),
    );
    write(
        &home.path().join(".claude/skills/mine/SKILL.md"),
        "---\ndescription: The user's own skill.\n---\nRun run.sh.\n",
    );
    write(&home.path().join(".claude/skills/mine/run.sh"), "echo user-skill-ran\n");
    let user = discover(&[SkillRoot {
        dir: home.path().join(".claude/skills"),
        shown: "~/.claude/skills".into(),
        source: SkillSource::User,
        bound: home.path().to_path_buf(),
    }]);
    let skills = discover_project(&ws.path().canonicalize().unwrap()).merged(user);
    assert_eq!(skills.skills.len(), 2, "{:?}", skills.notices);

    let dir = tempfile::tempdir().unwrap();
    let script = support::script(
        &dir,
        "s.yaml",
        "- \"<skill>\\nname: stamp\\n</skill>\"\n\
         - \"<bash>\\ncmd: bash /workspace/.claude/skills/stamp/scripts/stamp.sh\\n</bash>\"\n\
         - \"<skill>\\nname: mine\\n</skill>\"\n\
         - \"<bash>\\ncmd: bash /opt/agent/skills/mine/run.sh; touch /opt/agent/skills/mine/x || echo read-only\\n</bash>\"\n\
         - \"<finish>\\nmessage: done\\n</finish>\"\n",
    );
    let model = Arc::new(ScriptedBackend::from_file(&script).unwrap());
    let config = Config::default();
    let mut image = ImageContainer::new(agent_sandbox::BASE_IMAGE);
    image.network = false;
    image.binds = vec![format!("{}:/workspace", ws.path().display())];
    image.workdir = Some("/workspace".into());
    let mut request = EpisodeRequest::headless(&config, ContainerSource::Image(image), "it-skills", "it-skills-1");
    request.skills = skills;
    let mut notices = Vec::new();
    let episode = build_episode(&engine, &config, model.as_ref(), request, &mut |n| notices.push(n)).await.unwrap();
    let prompt = &episode.session.system_prompt;
    assert!(prompt.contains("# Skills") && prompt.contains("- stamp: Stamp the workspace"), "{prompt}");
    assert!(prompt.contains("- mine: The user's own skill."), "{prompt}");
    // Progressive disclosure: the body is not in the prompt.
    assert!(!prompt.contains("Run `scripts/stamp.sh`"), "{prompt}");
    assert!(episode.specs.get("skill").is_some());
    let mut running = episode.spawn(model);
    running.handle.ops.send(Op::UserTurn { text: "stamp the workspace".into() }).unwrap();
    let mut events = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(120), running.handle.events.recv()).await.unwrap() {
        events.push(ev);
    }
    let outcome = running.finish(Duration::from_secs(30)).await;
    assert!(outcome.finished(), "{outcome:?}");
    let obs = observations(&events);
    assert!(obs[0].contains("Run `scripts/stamp.sh`"), "{}", obs[0]);
    assert!(obs[0].contains("/workspace/.claude/skills/stamp/scripts/stamp.sh"), "{}", obs[0]);
    assert!(obs[1].contains("stamp-ok"), "{}", obs[1]);
    assert!(obs[2].contains("/opt/agent/skills/mine/run.sh"), "{}", obs[2]);
    assert!(obs[3].contains("user-skill-ran") && obs[3].contains("read-only"), "{}", obs[3]);
    let stamp = std::fs::read_to_string(ws.path().join("stamp.txt")).unwrap();
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    assert!(stamp.starts_with("stamped in ") && !stamp.contains(host.trim()) || host.trim().is_empty(), "{stamp}");
    assert!(!Path::new(&marker).exists(), "the skill's script ran on this computer");
    assert!(!home.path().join(".claude/skills/mine/x").exists());
    assert!(matches!(events.last(), Some(Event::EpisodeEnd { reason: EndReason::Finished, .. })));
}
