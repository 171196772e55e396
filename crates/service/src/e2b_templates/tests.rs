//! Tests of [`super`].
use super::*;
use sandboxd_images::dockerfile::{self, Command, Instruction};

fn step(kind: &str, args: &[&str]) -> E2bStep {
    E2bStep {
        kind: kind.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        files_hash: (kind == "COPY").then(|| "a".repeat(64)),
        force: false,
    }
}

fn build(steps: Vec<E2bStep>) -> E2bBuild {
    E2bBuild {
        from: E2bFrom::Template("base".into()),
        credentials: None,
        force: false,
        steps,
        start_cmd: None,
        ready_cmd: None,
    }
}

#[test]
fn a_template_translates_to_a_dockerfile_the_parser_reads_back_verbatim() {
    let b = build(vec![
        step(
            "COPY",
            &["app dir/*.txt", "/home/user/$HOME/", "user", "0755"],
        ),
        step("ENV", &["A", "x \"quoted\" $NOT \\ back", "B_2", ""]),
        step("RUN", &["echo \"$A\" > /tmp/a && echo 'it''s'", "root"]),
        step("WORKDIR", &["/srv/my app"]),
        step("USER", &["root"]),
        step("RUN", &["id -u"]),
    ]);
    let t = dockerfile_of(&b, "n0nce").unwrap();
    assert_eq!(t.copies, [("step-1".to_string(), "a".repeat(64))]);
    let parsed = dockerfile::parse(&t.dockerfile, &Default::default()).unwrap();
    let stage = parsed.target().unwrap();
    assert_eq!(stage.from.image, "base");
    let got: Vec<&Instruction> = stage.steps.iter().map(|s| &s.instruction).collect();
    match got[1] {
        Instruction::Copy {
            sources,
            dest,
            chown,
            chmod,
        } => {
            assert_eq!(sources, &["step-1/app dir/*.txt"]);
            assert_eq!(dest, "/home/user/$HOME/");
            assert_eq!(chown.as_deref(), Some("user"));
            assert_eq!(chmod.as_deref(), Some("0755"));
        }
        other => panic!("{other:?}"),
    }
    match got[2] {
        Instruction::Env(pairs) => assert_eq!(
            pairs,
            &[
                ("A".to_string(), "x \"quoted\" $NOT \\ back".to_string()),
                ("B_2".into(), "".into())
            ]
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(got[3], &Instruction::User("root".into()));
    assert_eq!(
        got[4],
        &Instruction::Run {
            command: Command::Exec(vec![
                "/bin/sh".into(),
                "-c".into(),
                "echo \"$A\" > /tmp/a && echo 'it''s'".into()
            ])
        }
    );
    assert_eq!(got[5], &Instruction::User("user".into()));
    assert_eq!(got[6], &Instruction::Workdir("/srv/my app".into()));
    assert_eq!(got[7], &Instruction::User("root".into()));
    assert_eq!(got.len(), 9, "{}", t.dockerfile);
}

#[test]
fn the_e2b_base_image_is_base_and_forced_steps_get_fresh_inputs() {
    let mut b = build(vec![step("COPY", &["a", "/a"]), step("RUN", &["true"])]);
    b.from = E2bFrom::Image("e2bdev/base".into());
    b.force = true;
    b.start_cmd = Some("python app.py".into());
    let t = dockerfile_of(&b, "n0nce").unwrap();
    assert!(t.dockerfile.contains("FROM base\n"), "{}", t.dockerfile);
    // A COPY that names no user copies as the current one (`user` by default).
    assert!(
        t.dockerfile
            .contains(r#"COPY --chown=user ["step-1-n0nce/a","/a"]"#),
        "{}",
        t.dockerfile
    );
    assert!(t.dockerfile.contains("ARG E2B_FORCE_1=n0nce\n"));
    assert_eq!(t.copies[0].0, "step-1-n0nce");
    assert!(t
        .dockerfile
        .contains(r#"CMD ["/bin/bash","-l","-c","python app.py"]"#));
    dockerfile::parse(&t.dockerfile, &Default::default()).unwrap();
}

#[test]
fn what_cannot_be_written_is_refused_by_step() {
    for (s, why) in [
        (step("ENV", &["A"]), "step 1: ENV needs key, value pairs"),
        (
            step("ENV", &["1A", "x"]),
            "not an environment variable name",
        ),
        (step("ENV", &["A", "x\ny"]), "line break"),
        (step("RUN", &[]), "RUN needs a command"),
        (step("USER", &["a b"]), "one word"),
        (step("HEALTHCHECK", &["x"]), "not supported"),
        (
            E2bStep {
                files_hash: None,
                ..step("COPY", &["a", "/b"])
            },
            "filesHash",
        ),
    ] {
        let err = dockerfile_of(&build(vec![s]), "n").unwrap_err().to_string();
        assert!(err.contains(why), "{err}");
    }
}

#[test]
fn a_failing_line_maps_back_to_its_e2b_step() {
    let b = build(vec![
        step("ENV", &["A", "1"]),
        step("RUN", &["true", "root"]),
        step("RUN", &["false"]),
    ]);
    let t = dockerfile_of(&b, "n").unwrap();
    let line = t
        .dockerfile
        .lines()
        .position(|l| l.contains("\"false\""))
        .unwrap()
        + 1;
    let error = format!("step 6/6 (line {line}) failed: the command exited with code 1");
    assert_eq!(failed_step(&t.dockerfile, &error, true), "3");
    let root_line = t.dockerfile.lines().position(|l| l == "USER root").unwrap() + 1;
    assert_eq!(
        failed_step(&t.dockerfile, &format!("(line {root_line}) failed"), true),
        "2"
    );
    assert_eq!(failed_step(&t.dockerfile, "pulling failed", false), "base");
    assert_eq!(
        failed_step(&t.dockerfile, "recording failed", true),
        "finalize"
    );
}

#[test]
fn uploads_are_reassembled_under_their_step_directory_and_may_not_climb() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    b.append_data(&mut h, "app", std::io::empty()).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o644);
    h.set_size(3);
    b.append_data(&mut h, "app/hi.txt", &b"hi\n"[..]).unwrap();
    let plain = b.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&plain).unwrap();
    let (h1, h2) = ("1".repeat(64), "2".repeat(64));
    std::fs::write(dir.path().join(&h1), gz.finish().unwrap()).unwrap();
    std::fs::write(dir.path().join(&h2), &plain).unwrap();
    check_archive(&dir.path().join(&h1)).unwrap();
    let copies = [
        ("step-1".to_string(), h1),
        ("step-3".to_string(), h2.clone()),
    ];
    let context = assemble_context(dir.path(), &copies).unwrap();
    let ctx = crate::builds::context::Context::read(&context).unwrap();
    let selected = ctx.select(&["step-3/app".into()], "/x").unwrap();
    assert_eq!(selected.len(), 1);
    assert_eq!(selected[0].0, "/x/hi.txt");
    assert!(ctx.select(&["step-1/app/hi.txt".into()], "/y").is_ok());

    let missing = assemble_context(dir.path(), &[("step-2".into(), "3".repeat(64))]);
    assert!(missing.unwrap_err().to_string().contains("not uploaded"));
    std::fs::write(dir.path().join("junk"), b"not a tar at all").unwrap();
    assert!(check_archive(&dir.path().join("junk")).is_err());

    let mut evil = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    h.set_mode(0o644);
    {
        let name = b"../../etc/evil";
        h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name);
    }
    h.set_cksum();
    evil.append(&h, &b"x"[..]).unwrap();
    let h4 = "4".repeat(64);
    std::fs::write(dir.path().join(&h4), evil.into_inner().unwrap()).unwrap();
    let err = assemble_context(dir.path(), &[("step-1".into(), h4)]).unwrap_err();
    assert!(err.to_string().contains("climbs out"), "{err}");
}

#[test]
fn hashes_are_64_lowercase_hex_digits() {
    assert!(valid_hash(&"0af9".repeat(16)));
    for bad in ["", "abc", &"A".repeat(64), &"g".repeat(64), &"a".repeat(65)] {
        assert!(!valid_hash(bad), "{bad}");
    }
}
