use super::*;

fn yaml(text: &str) -> Value {
    serde_yaml::from_str(text).unwrap()
}

fn merged(base: &str, over: &str) -> Value {
    merge_files(yaml(base), yaml(over))
}

#[test]
fn mappings_merge_key_by_key_and_scalars_of_the_later_file_win() {
    let m = merged(
        "services:\n  main:\n    build: {context: .}\n    user: root\n    working_dir: /app\n",
        "services:\n  main:\n    user: \"1000\"\n  db:\n    image: postgres\n",
    );
    assert_eq!(
        m,
        yaml(
            "services:\n  main:\n    build: {context: .}\n    user: \"1000\"\n    working_dir: /app\n  db:\n    image: postgres\n"
        )
    );
}

#[test]
fn a_build_path_is_its_context_and_commands_are_replaced_whole() {
    let m = merged(
        "services:\n  main:\n    build: {context: ., args: [A=1, B=2]}\n    command: [sh, -c, sleep infinity]\n\
         \x20   healthcheck: {test: [CMD, a], interval: 1s}\n",
        "services:\n  main:\n    build: sub\n    command: [python, app.py]\n    healthcheck: {test: [CMD, b]}\n",
    );
    let main = &m["services"]["main"];
    assert_eq!(main["build"], yaml("{context: sub, args: [A=1, B=2]}"));
    assert_eq!(main["command"], yaml("[python, app.py]"));
    assert_eq!(main["healthcheck"], yaml("{test: [CMD, b], interval: 1s}"));
}

#[test]
fn environment_merges_by_name_in_either_form() {
    let lists =
        merged("services:\n  s:\n    environment: [A=1, B=2, C]\n", "services:\n  s:\n    environment: [B=3, D=4]\n");
    assert_eq!(lists["services"]["s"]["environment"], yaml("[A=1, B=3, C, D=4]"));
    let mixed = merged("services:\n  s:\n    environment: {A: 1, B: x}\n", "services:\n  s:\n    environment: [A=2]\n");
    assert_eq!(mixed["services"]["s"]["environment"], yaml("[A=2, B=x]"));
    let maps = merged("services:\n  s:\n    environment: {A: 1}\n", "services:\n  s:\n    environment: {A: 2, B: ~}\n");
    assert_eq!(maps["services"]["s"]["environment"], yaml("{A: 2, B: ~}"));
}

#[test]
fn volumes_are_unique_by_target_and_other_lists_append_once() {
    let m = merged(
        "services:\n  s:\n    volumes: [\"a:/data\", \"/cache\"]\n    ports: [\"80\"]\n    env_file: one.env\n",
        "services:\n  s:\n    volumes: [\"b:/data:ro\", {type: tmpfs, target: /cache}, \"c:/new\"]\n\
         \x20   ports: [\"80\", \"81\"]\n    env_file: [two.env]\n",
    );
    let s = &m["services"]["s"];
    assert_eq!(s["volumes"], yaml("[\"b:/data:ro\", {type: tmpfs, target: /cache}, \"c:/new\"]"));
    assert_eq!(s["ports"], yaml("[\"80\", \"81\"]"));
    assert_eq!(s["env_file"], yaml("[one.env, two.env]"));
}

#[test]
fn depends_on_lists_become_mappings_before_merging() {
    let m = merged(
        "services:\n  s:\n    depends_on: [db]\n",
        "services:\n  s:\n    depends_on:\n      cache: {condition: service_healthy}\n",
    );
    assert_eq!(
        m["services"]["s"]["depends_on"],
        yaml("{db: {condition: service_started}, cache: {condition: service_healthy}}")
    );
}

#[test]
fn reset_removes_override_replaces_and_an_empty_value_adds_nothing() {
    let m = merged(
        "services:\n  s:\n    build: {context: .}\n    ports: [\"80\"]\n    environment: [A=1]\n    user: root\n",
        "services:\n  s:\n    build: !reset null\n    ports: !override [\"90\"]\n    environment:\n    image: x\n",
    );
    assert_eq!(m, yaml("services:\n  s:\n    ports: [\"90\"]\n    environment: [A=1]\n    user: root\n    image: x\n"));
    // Tags in a part the earlier file does not have are resolved too.
    let m = merged("services: {}\n", "services:\n  new:\n    image: !override y\n    user: !reset null\n");
    assert_eq!(m, yaml("services:\n  new:\n    image: y\n"));
}
