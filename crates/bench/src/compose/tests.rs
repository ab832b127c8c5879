use super::*;

fn parse(text: &str, dialect: Dialect) -> Result<Compose, TaskError> {
    let root = Path::new("/t");
    Compose::parse(text, "dc.yaml", ComposePaths { dir: root, root }, dialect)
}

const SCRAPER: &str = r#"
services:
  client:
    build:
      context: client
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
    depends_on:
      server:
        condition: service_healthy
  server:
    build:
      context: server
    command: [ "python", "./mock_website.py" ]
    healthcheck:
      test: [ "CMD", "curl", "-f", "http://localhost:8000" ]
      interval: 10s
      timeout: 5s
      retries: 1
"#;

#[test]
fn parses_a_two_service_file_in_start_order() {
    let c = parse(SCRAPER, Dialect::Tb1).unwrap();
    let names: Vec<&str> = c.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["server", "client"]);
    let client = c.client().unwrap();
    assert_eq!(client.environment, ["TEST_DIR=/tests"]);
    assert_eq!(
        client.image,
        ImageSource::Build { context: "/t/client".into(), dockerfile: "/t/client/Dockerfile".into() }
    );
    let server = c.sidecars().next().unwrap();
    assert_eq!(server.command.as_deref().unwrap(), ["python", "./mock_website.py"]);
    let hc = server.healthcheck.as_ref().unwrap();
    assert_eq!(hc.argv, ["curl", "-f", "http://localhost:8000"]);
    assert_eq!(hc.deadline, Duration::from_secs(60));
}

#[test]
fn errors_name_the_field() {
    let e = parse("services:\n  server:\n    image: x\n", Dialect::Tb1).unwrap_err();
    assert!(e.to_string().contains("services.client"), "{e}");
    let e = parse("services:\n  client:\n    image: ${X}\n", Dialect::Tb1).unwrap_err();
    assert!(e.to_string().contains("services.client.build"), "{e}");
    let text = "services:\n  client:\n    build: .\n    depends_on: [db]\n";
    let e = parse(text, Dialect::Tb1).unwrap_err();
    assert!(e.to_string().contains("depends on `db`"), "{e}");
    let e = parse("services: [\n", Dialect::Tb1).unwrap_err();
    assert!(e.to_string().contains("line"), "{e}");
}

#[test]
fn variables() {
    let raw = Value::from("A=${T_BENCH_TEST_DIR}/x${NOPE}");
    let (doc, notes) = interpolated(&raw, Dialect::Tb1, &BTreeMap::new()).unwrap();
    assert_eq!(doc, Value::from("A=/tests/x"));
    assert!(notes.len() == 1 && notes[0].starts_with("`NOPE` is not set"), "{notes:?}");
    let env = BTreeMap::from([("TEST_DIR".to_string(), "/mine".to_string())]);
    let (doc, _) = interpolated(&Value::from("TEST_DIR=${TEST_DIR}"), Dialect::Harbor, &env).unwrap();
    assert_eq!(doc, Value::from("TEST_DIR=/tests"), "the harness's variables win");
}

/// A task folder with a compose file in `environment/` (as Harbor lays it out).
fn task_dir(compose: &str) -> (tempfile::TempDir, Result<Compose, TaskError>) {
    let d = tempfile::tempdir().unwrap();
    let env = d.path().join("environment");
    std::fs::create_dir_all(env.join("data")).unwrap();
    std::fs::write(env.join("db.env"), "PASSWORD=from-file\nMODE=file\n").unwrap();
    let paths = ComposePaths { dir: &env, root: d.path() };
    let c = Compose::parse(compose, "dc.yaml", paths, Dialect::Harbor);
    (d, c)
}

const FULL: &str = r#"
version: "3.8"
x-common: &common
  restart: always
services:
  main:
    build: .
    entrypoint: ["/bin/other"]
    init: true
    user: "1000:1000"
    tmpfs:
      - /root:size=100M,mode=755
    volumes:
      - ${HOST_VERIFIER_LOGS_PATH}:/logs/verifier
      - shared:/shared
      - ./data:/data:ro
    ports: ["8080:80"]
    networks: [app]
    deploy:
      resources: {limits: {cpus: "${CPUS}"}}
  db:
    image: postgres:16
    entrypoint: /docker-entrypoint.sh -c 'max_connections=5'
    env_file: [db.env, {path: missing.env, required: false}]
    environment: {MODE: env}
    tmpfs: /run
    volumes:
      - type: volume
        source: shared
        target: /var/lib/shared
        read_only: true
      - type: bind
        source: ./data
        target: /seed
      - type: tmpfs
        target: /scratch
        tmpfs: {size: 1m}
      - /anon
    ports:
      - target: 5432
        host_ip: 127.0.0.1
    cap_add: [NET_ADMIN]
    cap_drop: [MKNOD]
    privileged: false
    shm_size: 256m
    hostname: database
    extra_hosts: ["mirror:10.0.0.1"]
    logging: {driver: none}
    restart: always
volumes:
  shared:
  cache:
    driver: local
networks:
  app: {}
configs: {}
"#;

#[test]
fn every_supported_form_is_read() {
    let (d, c) = task_dir(FULL);
    let c = c.unwrap();
    let real = |p: &str| d.path().canonicalize().unwrap().join(p);
    assert_eq!(c.volumes, ["shared", "cache"]);
    let main = c.client().unwrap();
    assert_eq!(main.entrypoint, None);
    assert!(!main.init);
    assert_eq!(main.user.as_deref(), Some("1000:1000"));
    assert_eq!(
        main.mounts,
        [
            Mount::Volume { name: Some("shared".into()), target: "/shared".into(), read_only: false },
            Mount::Bind { source: real("environment/data"), target: "/data".into(), read_only: true },
            Mount::Tmpfs { target: "/root".into(), options: "size=100M,mode=755".into() },
        ]
    );
    assert_eq!(main.ports, [PublishedPort { container_port: 80, host_port: Some(8080), protocol: "tcp".into() }]);
    let db = c.sidecars().next().unwrap();
    assert_eq!(db.entrypoint.as_deref().unwrap(), ["/docker-entrypoint.sh", "-c", "max_connections=5"]);
    assert_eq!(db.environment, ["PASSWORD=from-file", "MODE=env"]);
    assert_eq!(
        db.mounts,
        [
            Mount::Volume { name: Some("shared".into()), target: "/var/lib/shared".into(), read_only: true },
            Mount::Bind { source: real("environment/data"), target: "/seed".into(), read_only: false },
            Mount::Tmpfs { target: "/scratch".into(), options: "size=1048576".into() },
            Mount::Volume { name: None, target: "/anon".into(), read_only: false },
            Mount::Tmpfs { target: "/run".into(), options: String::new() },
        ]
    );
    assert_eq!(db.ports, [PublishedPort::tcp(5432)]);
    assert_eq!(
        (db.cap_add.as_slice(), db.cap_drop.as_slice()),
        (&["NET_ADMIN".to_string()][..], &["MKNOD".to_string()][..])
    );
    assert_eq!(db.shm_size, Some(256 << 20));
    assert_eq!(db.hostname.as_deref(), Some("database"));
    assert_eq!(db.extra_hosts, ["mirror:10.0.0.1"]);
    assert_eq!(
        c.notices,
        [
            "compose: ignoring configs, volumes.cache.driver, services.db.logging, services.db.restart",
            "compose: services.main.entrypoint is ignored: the agent's container runs the sandbox's own init",
            "compose: services.main.init is ignored: the agent's container runs the sandbox's own init",
        ]
    );
}

#[test]
fn what_a_task_must_not_do_is_refused() {
    let refused = [
        ("    privileged: true\n", "services.main.privileged", "privileged containers are refused"),
        ("    volumes: [\"/etc:/host-etc\"]\n", "services.main.volumes", "outside the task's folder"),
        ("    volumes: [\"../../..:/up\"]\n", "services.main.volumes", "outside the task's folder"),
        ("    volumes: [\"~/.ssh:/keys\"]\n", "services.main.volumes", "home-directory"),
        ("    volumes: [\"./nope:/x\"]\n", "services.main.volumes", "cannot be mounted"),
        ("    volumes: [\"undeclared:/x\"]\n", "services.main.volumes", "not declared"),
        ("    env_file: /etc/passwd\n", "services.main.env_file", "outside the task's folder"),
        ("    ports: [\"99999\"]\n", "services.main.ports", "not a port number"),
        ("    volumes: [{type: npipe, source: x, target: /x}]\n", "services.main.volumes", "not supported"),
    ];
    for (extra, field, reason) in refused {
        let (_d, c) = task_dir(&format!("services:\n  main:\n    build: .\n{extra}"));
        let e = c.unwrap_err().to_string();
        assert!(e.contains(field) && e.contains(reason), "{extra}: {e}");
    }
    let (_d, c) = task_dir("services:\n  main:\n    build: .\nvolumes:\n  v:\n    external: true\n");
    let e = c.unwrap_err().to_string();
    assert!(e.contains("volumes.v.external"), "{e}");
}

#[test]
fn a_symlink_out_of_the_task_is_refused() {
    let outside = tempfile::tempdir().unwrap();
    let d = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), d.path().join("link")).unwrap();
    let paths = ComposePaths { dir: d.path(), root: d.path() };
    let text = "services:\n  client:\n    build: .\n    volumes: [\"./link:/x\"]\n";
    let e = Compose::parse(text, "dc.yaml", paths, Dialect::Tb1).unwrap_err().to_string();
    assert!(e.contains("outside the task's folder"), "{e}");
}

#[test]
fn terminal_bench_files_need_no_notice() {
    let tb1 = "services:\n  client:\n    build:\n      dockerfile: Dockerfile\n    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}\n    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}\n    command: [ \"sh\", \"-c\", \"sleep infinity\" ]\n    environment:\n      - TEST_DIR=${T_BENCH_TEST_DIR}\n    volumes:\n      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}\n";
    let c = parse(tb1, Dialect::Tb1).unwrap();
    assert!(c.notices.is_empty(), "{:?}", c.notices);
    assert!(c.client().unwrap().mounts.is_empty());
    // Another harness's variable leaves nothing to mount, and says so.
    let c = parse("services:\n  client:\n    build: .\n    volumes: [\"${OTHER}:/x\"]\n", Dialect::Tb1).unwrap();
    assert!(c.notices[0].contains("`${OTHER}:/x` is not mounted"), "{:?}", c.notices);
}

/// A Harbor task's file that only adds a sidecar and what `main` needs of it: merged over
/// Harbor's base, `main` is built from the environment folder.
const OVERLAY: &str = r#"
services:
  main:
    depends_on:
      api:
        condition: service_healthy
    environment:
      API_URL: http://api:${API_PORT:-8080}
    volumes:
      - ./data:/data:ro
  api:
    image: agent-base:bookworm
    environment:
      - TOKEN=${API_TOKEN:-dev-token}
    healthcheck:
      test: ["CMD", "true"]
"#;

#[test]
fn a_harbor_file_is_merged_over_harbors_base() {
    let d = tempfile::tempdir().unwrap();
    let env = d.path().join("environment");
    std::fs::create_dir_all(env.join("data")).unwrap();
    let paths = ComposePaths { dir: &env, root: d.path() };
    let task_env = BTreeMap::from([("API_PORT".to_string(), "9000".to_string())]);
    let c = Compose::parse_harbor(OVERLAY, "dc.yaml", paths, &task_env).unwrap();
    let names: Vec<&str> = c.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["api", "main"], "the sidecar starts first");
    let main = c.client().unwrap();
    assert_eq!(main.image, ImageSource::Build { context: env.join("."), dockerfile: env.join("./Dockerfile") });
    assert_eq!(main.depends_on, ["api"]);
    assert_eq!(main.environment, ["API_URL=http://api:9000"], "the task's variable wins over the default");
    let real = d.path().canonicalize().unwrap().join("environment/data");
    assert_eq!(main.mounts, [Mount::Bind { source: real, target: "/data".into(), read_only: true }]);
    let api = c.sidecars().next().unwrap();
    assert_eq!(api.environment, ["TOKEN=dev-token"], "an unset variable takes its default");
    assert!(c.notices.is_empty(), "{:?}", c.notices);

    // The same file read whole, as before: `main` has nothing to run.
    let e = Compose::parse(OVERLAY, "dc.yaml", paths, Dialect::Harbor).unwrap_err().to_string();
    assert!(e.contains("services.main.build"), "{e}");
    // A task's own build of `main` is merged over the base's.
    let own = "services:\n  main:\n    build:\n      dockerfile: other.Dockerfile\n";
    let c = Compose::parse_harbor(own, "dc.yaml", paths, &BTreeMap::new()).unwrap();
    assert_eq!(
        c.client().unwrap().image,
        ImageSource::Build { context: env.join("."), dockerfile: env.join("./other.Dockerfile") }
    );
}
