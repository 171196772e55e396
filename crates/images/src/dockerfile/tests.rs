use super::*;

fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn ok(text: &str) -> Dockerfile {
    match parse(text, &BTreeMap::new()) {
        Ok(df) => df,
        Err(e) => panic!("{e}\n{text}"),
    }
}

fn err(text: &str) -> DockerfileError {
    match parse(text, &BTreeMap::new()) {
        Ok(df) => panic!("parsed: {df:?}\n{text}"),
        Err(e) => e,
    }
}

fn instructions(df: &Dockerfile) -> Vec<Instruction> {
    df.stages[df.stages.len() - 1]
        .steps
        .iter()
        .map(|s| s.instruction.clone())
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

const REALISTIC: &str = r#"# syntax=docker/dockerfile:1
ARG PY=3.12
FROM python:${PY}-slim
ARG APP_USER=app
ENV PYTHONUNBUFFERED=1 HOME="/home/app user"
ENV LEGACY value with spaces
WORKDIR /srv
WORKDIR app
RUN apt-get update && \
    # a comment inside the continuation
    apt-get install -y curl
RUN ["pip", "install", "uv"]
RUN <<EOF
set -e
echo "$HOME"
EOF
COPY --chown=${APP_USER}:${APP_USER} requirements.txt ./
ADD vendor.tar.gz /opt/
USER $APP_USER
LABEL org.opencontainers.image.title="demo app" version=1
EXPOSE 8080 53/udp
ENTRYPOINT ["python", "-m", "app"]
cmd --port 8080
"#;

#[test]
fn realistic_dockerfile_becomes_the_expected_plan() {
    let df = ok(REALISTIC);
    assert_eq!(df.stages.len(), 1);
    let stage = &df.stages[0];
    assert_eq!(stage.from.image, "python:3.12-slim");
    assert_eq!(stage.from.line, 3);
    assert_eq!(stage.name, None);
    assert_eq!(
        instructions(&df),
        vec![
            Instruction::Arg {
                name: "APP_USER".into(),
                default: Some("app".into()),
                value: Some("app".into()),
            },
            Instruction::Env(pairs(&[
                ("PYTHONUNBUFFERED", "1"),
                ("HOME", "/home/app user")
            ])),
            Instruction::Env(pairs(&[("LEGACY", "value with spaces")])),
            Instruction::Workdir("/srv".into()),
            Instruction::Workdir("/srv/app".into()),
            Instruction::Run {
                command: Command::Shell("apt-get update &&     apt-get install -y curl".into()),
            },
            Instruction::Run {
                command: Command::Exec(strings(&["pip", "install", "uv"])),
            },
            Instruction::Run {
                command: Command::Shell("set -e\necho \"$HOME\"".into()),
            },
            Instruction::Copy {
                sources: strings(&["requirements.txt"]),
                dest: "/srv/app/".into(),
                chown: Some("app:app".into()),
                chmod: None,
            },
            Instruction::Add {
                sources: strings(&["vendor.tar.gz"]),
                dest: "/opt/".into(),
                chown: None,
                chmod: None,
                extract: true,
            },
            Instruction::User("app".into()),
            Instruction::Label(pairs(&[
                ("org.opencontainers.image.title", "demo app"),
                ("version", "1")
            ])),
            Instruction::Expose(strings(&["8080/tcp", "53/udp"])),
            Instruction::Entrypoint(Command::Exec(strings(&["python", "-m", "app"]))),
            Instruction::Cmd(Command::Shell("--port 8080".into())),
        ]
    );
    let lines: Vec<usize> = stage.steps.iter().map(|s| s.line).collect();
    assert_eq!(
        lines,
        vec![4, 5, 6, 7, 8, 9, 12, 13, 17, 18, 19, 20, 21, 22, 23]
    );
    assert_eq!(
        stage.steps[5].text,
        "RUN apt-get update &&     apt-get install -y curl"
    );
    assert_eq!(stage.steps[14].text, "CMD --port 8080");
    assert_eq!(
        stage.steps[8].text,
        "COPY --chown=${APP_USER}:${APP_USER} requirements.txt ./"
    );
    assert!(df.warnings.is_empty(), "{:?}", df.warnings);
}

#[test]
fn every_error_names_its_line() {
    let cases: &[(&str, usize)] = &[
        ("FROM a\n\nFROBNICATE x", 3),
        ("FROM a\nCOPY onlyone", 2),
        ("FROM a\nCOPY", 2),
        ("# comment\nRUN echo hi\nFROM a", 2),
        ("FROM a\nENV A=\"unterminated", 2),
        ("FROM a\nWORKDIR ${A", 2),
        ("FROM a\nWORKDIR ${A:?x}", 2),
        ("FROM a\nONBUILD RUN x", 2),
        ("FROM a\nRUN <<EOF\nbody", 2),
        ("FROM a\nADD https://example.com/x.tgz /x", 2),
        ("FROM a\nCOPY ../secret /x", 2),
        ("FROM a\nCOPY --from=build /a /b", 2),
        ("FROM a\nEXPOSE http", 2),
        ("FROM a\nSHELL /bin/bash -c", 2),
        ("FROM a\nRUN --mount=type=cache,target=/c make", 2),
        ("FROM a\nRUN", 2),
        ("# escape=x\nFROM a", 1),
        ("FROM a AS b\nFROM b", 2),
        ("FROM a\nCOPY <<EOF /f\nhi\nEOF", 2),
        ("FROM a\nCOPY --chown= a /b", 2),
        ("FROM a\nCOPY $UNSET /b", 2),
        ("FROM a\nENV A=1 B", 2),
        ("FROM a\nENV A", 2),
        ("FROM a\nARG A=1 B=2", 2),
        ("FROM a\nUSER", 2),
        ("FROM a\nFROM b c d", 2),
    ];
    for (text, line) in cases {
        let e = err(text);
        let message = e.to_string();
        assert!(
            message.starts_with(&format!("line {line}: ")),
            "{text:?} gave {message:?}"
        );
    }
}

#[test]
fn errors_say_what_is_wrong() {
    let e = err("FROM a\nADD http://example.com/x /x");
    assert!(e
        .to_string()
        .contains("ADD from a URL is not supported; download in a RUN step"));
    assert!(matches!(
        err("FROM a\nCOPY x"),
        DockerfileError::MissingArguments { line: 2, .. }
    ));
    assert!(matches!(
        err("FROM a\nfoo bar"),
        DockerfileError::UnknownInstruction { line: 2, ref word } if word == "foo"
    ));
    assert!(matches!(
        err("USER x"),
        DockerfileError::NoFrom { line: 1, .. }
    ));
    assert!(matches!(
        err("FROM a\nLABEL a='b"),
        DockerfileError::UnterminatedQuote { line: 2 }
    ));
    assert!(matches!(
        err("FROM a\nUSER ${X"),
        DockerfileError::UnterminatedBrace { line: 2 }
    ));
    assert!(err("FROM a\nCOPY --from=builder /a /b")
        .to_string()
        .contains("only single-stage builds"));
}

#[test]
fn empty_and_oversized_dockerfiles_are_refused() {
    assert_eq!(err(""), DockerfileError::Empty);
    assert_eq!(err("\n  # only a comment\n\n"), DockerfileError::Empty);
    assert_eq!(err("ARG A=1"), DockerfileError::MissingFrom);
    let big = format!("FROM a\nRUN {}", "x".repeat(MAX_BYTES));
    assert!(matches!(err(&big), DockerfileError::TooLarge { .. }));
    let many = format!("FROM a\n{}", "USER u\n".repeat(MAX_INSTRUCTIONS));
    assert_eq!(
        err(&many),
        DockerfileError::TooManyInstructions {
            line: MAX_INSTRUCTIONS + 1
        }
    );
}

#[test]
fn substitution_doubling_is_bounded() {
    let mut text = String::from("FROM a\nENV A=xxxxxxxxxxxxxxxx\n");
    for _ in 0..40 {
        text.push_str("ENV A=$A$A\n");
    }
    assert!(matches!(err(&text), DockerfileError::TooLong { .. }));
    let mut text = String::from("FROM a\nENV A=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n");
    text.push_str(&format!("LABEL {}\n", "b=$A$A$A$A ".repeat(40_000)));
    assert!(matches!(err(&text), DockerfileError::TooLong { .. }));
}

#[test]
fn substitution_uses_defaults_and_modifiers() {
    let df = ok(concat!(
        "FROM a\n",
        "ARG NAME=world\n",
        "ARG EMPTY=\n",
        "ENV A=${NAME} B=${UNSET:-dflt} C=${NAME:+alt} D=${UNSET:+alt}x E=${EMPTY:-e} F=${EMPTY-f}\n",
        "ENV G='$NAME' H=\"$NAME\" I=\\$NAME J=${UNSET:-${NAME}-nested} K=$NAME.txt L=cost$\n",
    ));
    assert_eq!(
        instructions(&df)[2],
        Instruction::Env(pairs(&[
            ("A", "world"),
            ("B", "dflt"),
            ("C", "alt"),
            ("D", "x"),
            ("E", "e"),
            ("F", ""),
        ]))
    );
    assert_eq!(
        instructions(&df)[3],
        Instruction::Env(pairs(&[
            ("G", "$NAME"),
            ("H", "world"),
            ("I", "$NAME"),
            ("J", "world-nested"),
            ("K", "world.txt"),
            ("L", "cost$"),
        ]))
    );
}

#[test]
fn build_args_override_defaults_and_undeclared_ones_are_reported() {
    let text = "FROM a\nARG V=default\nARG W\nUSER $V-$W-$X\n";
    let df = parse(text, &args(&[("V", "given"), ("X", "ignored")])).unwrap();
    assert_eq!(instructions(&df)[2], Instruction::User("given--".into()));
    assert_eq!(df.warnings.len(), 1, "{:?}", df.warnings);
    assert!(df.warnings[0].contains("\"X\""));
    let df = parse(text, &BTreeMap::new()).unwrap();
    assert_eq!(instructions(&df)[2], Instruction::User("default--".into()));
}

#[test]
fn args_before_from_are_visible_only_in_from_unless_redeclared() {
    let text =
        "ARG TAG=1.0\nARG REG\nFROM ${REG:-docker.io}/app:$TAG\nUSER u$TAG\nARG TAG\nUSER u$TAG\n";
    let df = ok(text);
    assert_eq!(df.stages[0].from.image, "docker.io/app:1.0");
    let steps = instructions(&df);
    assert_eq!(steps[0], Instruction::User("u".into()));
    assert_eq!(steps[2], Instruction::User("u1.0".into()));
    let df = parse(text, &args(&[("TAG", "2.0"), ("REG", "r.io")])).unwrap();
    assert_eq!(df.stages[0].from.image, "r.io/app:2.0");
    assert_eq!(instructions(&df)[2], Instruction::User("u2.0".into()));
}

#[test]
fn env_is_visible_to_later_steps_and_wins_over_args() {
    let df = ok(concat!(
        "FROM a\n",
        "ENV DIR=/data\n",
        "WORKDIR /w\n",
        "COPY a.txt $DIR/\n",
        "COPY b.txt rel\n",
        "ARG DIR=/arg\n",
        "COPY c.txt ${DIR}\n",
        "ENV X=1 Y=$X\n",
    ));
    let steps = instructions(&df);
    let dest = |i: usize| match &steps[i] {
        Instruction::Copy { dest, .. } => dest.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(dest(2), "/data/");
    assert_eq!(dest(3), "/w/rel");
    assert_eq!(dest(5), "/data");
    // Inside one ENV, a variable is the value from before the instruction.
    assert_eq!(steps[6], Instruction::Env(pairs(&[("X", "1"), ("Y", "")])));
}

#[test]
fn base_image_env_and_workdir_seed_the_built_stage() {
    let base = RunConfig {
        env: vec!["PATH=/usr/bin:/bin".into()],
        working_dir: Some("/app".into()),
        ..RunConfig::default()
    };
    let df = parse_with_base(
        "FROM a\nENV PATH=/opt/bin:$PATH\nWORKDIR src\n",
        &BTreeMap::new(),
        &base,
    )
    .unwrap();
    assert_eq!(
        instructions(&df),
        vec![
            Instruction::Env(pairs(&[("PATH", "/opt/bin:/usr/bin:/bin")])),
            Instruction::Workdir("/app/src".into()),
        ]
    );
}

#[test]
fn run_cmd_and_entrypoint_are_not_substituted() {
    let df = ok("FROM a\nENV X=1\nRUN echo $X ${X}\nCMD [\"echo\", \"$X\"]\nENTRYPOINT echo $X\n");
    let steps = instructions(&df);
    assert_eq!(
        steps[1],
        Instruction::Run {
            command: Command::Shell("echo $X ${X}".into())
        }
    );
    assert_eq!(
        steps[2],
        Instruction::Cmd(Command::Exec(strings(&["echo", "$X"])))
    );
    assert_eq!(
        steps[3],
        Instruction::Entrypoint(Command::Shell("echo $X".into()))
    );
}

#[test]
fn escape_directive_makes_backtick_the_continuation_and_escape() {
    let df = ok("# escape=`\nFROM windows\nRUN dir c:\\ `\n  /b\nENV A=`$B C=c:\\path\n");
    assert_eq!(
        instructions(&df),
        vec![
            Instruction::Run {
                command: Command::Shell("dir c:\\   /b".into())
            },
            Instruction::Env(pairs(&[("A", "$B"), ("C", "c:\\path")])),
        ]
    );
    // Below the first non-directive line, `# escape=` is only a comment.
    let df = ok("FROM a\n# escape=`\nRUN a \\\n b\n");
    assert_eq!(
        instructions(&df),
        vec![Instruction::Run {
            command: Command::Shell("a  b".into())
        }]
    );
}

#[test]
fn malformed_exec_form_falls_back_to_shell_form() {
    let df = ok("FROM a\nRUN [\"echo\", 'single']\nCMD [1, 2]\nENTRYPOINT [\"a\",\n");
    assert_eq!(
        instructions(&df),
        vec![
            Instruction::Run {
                command: Command::Shell("[\"echo\", 'single']".into())
            },
            Instruction::Cmd(Command::Shell("[1, 2]".into())),
            Instruction::Entrypoint(Command::Shell("[\"a\",".into())),
        ]
    );
}

#[test]
fn heredoc_after_a_command_is_handed_to_the_shell_whole() {
    let df = ok("FROM a\nRUN cat <<'EOT' > /etc/motd\nhello $USER\nEOT\nRUN <<-EOF\n\techo tab\n\tEOF\nUSER u\n");
    assert_eq!(
        instructions(&df),
        vec![
            Instruction::Run {
                command: Command::Shell("cat <<'EOT' > /etc/motd\nhello $USER\nEOT".into())
            },
            Instruction::Run {
                command: Command::Shell("echo tab".into())
            },
            Instruction::User("u".into()),
        ]
    );
    assert_eq!(df.stages[0].steps[2].line, 8);
    assert!(matches!(
        err("FROM a\nRUN <<EOF bash\nx\nEOF"),
        DockerfileError::Unsupported { line: 2, .. }
    ));
}

#[test]
fn sources_are_clean_context_paths_and_globs_are_kept() {
    let df = ok("FROM a\nWORKDIR /w\nCOPY /abs/f ./x/../y *.py src/?.txt . \n");
    assert_eq!(
        instructions(&df)[1],
        Instruction::Copy {
            sources: strings(&["abs/f", "y", "*.py", "src/?.txt"]),
            dest: "/w/".into(),
            chown: None,
            chmod: None,
        }
    );
    let df = ok("FROM a\nCOPY --chmod=0755 [\"a b\", \"./\", \"/dest dir/\"]\n");
    assert_eq!(
        instructions(&df)[0],
        Instruction::Copy {
            sources: strings(&["a b", "."]),
            dest: "/dest dir/".into(),
            chown: None,
            chmod: Some("0755".into()),
        }
    );
    assert!(matches!(
        err("FROM a\nCOPY a/../../b /x"),
        DockerfileError::OutsideContext { line: 2, .. }
    ));
}

#[test]
fn line_numbers_count_crlf_continuations_and_comments() {
    let df = ok("FROM a\r\n# c\r\nRUN a \\\r\n# inside\r\n\r\n b\r\nUSER u\r\n");
    let lines: Vec<usize> = df.stages[0].steps.iter().map(|s| s.line).collect();
    assert_eq!(lines, vec![3, 7]);
    assert_eq!(df.stages[0].steps[0].text, "RUN a  b");
}

#[test]
fn workdir_resolves_against_the_previous_one() {
    let df = ok("FROM a\nWORKDIR a\nWORKDIR b/../c/\nWORKDIR /x/./y\nWORKDIR ../../..\n");
    assert_eq!(
        instructions(&df),
        vec![
            Instruction::Workdir("/a".into()),
            Instruction::Workdir("/a/c".into()),
            Instruction::Workdir("/x/y".into()),
            Instruction::Workdir("/".into()),
        ]
    );
}

#[test]
fn instructions_are_case_insensitive_and_ignored_ones_warn() {
    let df = ok("from a as Build\nrun x\nMAINTAINER me\nVOLUME /data\nHEALTHCHECK CMD true\nSTOPSIGNAL TERM\n");
    assert_eq!(df.stages[0].name.as_deref(), Some("build"));
    assert_eq!(df.stages[0].steps.len(), 1);
    assert_eq!(df.stages[0].steps[0].text, "RUN x");
    assert_eq!(df.warnings.len(), 4, "{:?}", df.warnings);
    assert!(df.warnings[1].starts_with("line 4: VOLUME"));
}

#[test]
fn only_the_last_stage_is_the_target() {
    let df = ok("FROM a AS one\nRUN x\nFROM b\nRUN y\n");
    assert_eq!(df.stages.len(), 2);
    let target = df.target().unwrap();
    assert_eq!(target.from.image, "b");
    assert_eq!(target.from.line, 3);
}

#[test]
fn cache_keys_differ_when_a_build_arg_changes_and_are_equal_otherwise() {
    let text = "FROM a\nARG V=1\nCOPY x /x\nRUN make\nENV E=1\nRUN make\n";
    let keys = |build: &[(&str, &str)]| -> Vec<String> {
        parse(text, &args(build)).unwrap().stages[0]
            .steps
            .iter()
            .map(|s| s.cache_key().to_string())
            .collect()
    };
    let plain = keys(&[]);
    assert_eq!(plain, keys(&[]));
    assert_eq!(plain, keys(&[("V", "1")]));
    let changed = keys(&[("V", "2")]);
    // The ARG itself and every RUN that sees it differ; the COPY, which does not use it, is equal.
    assert_ne!(plain[0], changed[0]);
    assert_eq!(plain[1], changed[1]);
    assert_ne!(plain[2], changed[2]);
    assert_ne!(plain[4], changed[4]);
    // The same RUN with different ENV before it has a different key.
    assert_ne!(plain[2], plain[4]);
    // A substituted value is in the key.
    let a = parse("FROM a\nARG D=/a\nCOPY x $D\n", &BTreeMap::new()).unwrap();
    let b = parse("FROM a\nARG D=/a\nCOPY x $D\n", &args(&[("D", "/b")])).unwrap();
    assert_ne!(
        a.stages[0].steps[1].cache_key(),
        b.stages[0].steps[1].cache_key()
    );
    assert!(plain[0].starts_with("sha256:") && plain[0].len() == 71);
}

#[test]
fn builder_replay_of_the_context_matches_the_parser() {
    let df = ok("FROM a\nARG V=1\nENV E=$V\nWORKDIR /w\nUSER u\nSHELL [\"/bin/bash\", \"-c\"]\n");
    let mut ctx = StepContext::new(&RunConfig::default());
    for step in &df.stages[0].steps {
        ctx.apply(&step.instruction);
    }
    assert_eq!(ctx.workdir, "/w");
    assert_eq!(ctx.user.as_deref(), Some("u"));
    assert_eq!(ctx.shell, strings(&["/bin/bash", "-c"]));
    assert_eq!(ctx.env.get("E").map(String::as_str), Some("1"));
    assert_eq!(ctx.args.get("V").map(String::as_str), Some("1"));
}

/// Deterministic xorshift64*, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn garbage_input_never_panics() {
    const PIECES: &[&str] = &[
        "FROM ",
        "RUN ",
        "COPY ",
        "ADD ",
        "ENV ",
        "ARG ",
        "WORKDIR ",
        "USER ",
        "LABEL ",
        "EXPOSE ",
        "CMD ",
        "ENTRYPOINT ",
        "SHELL ",
        "ONBUILD ",
        "# escape=`\n",
        "\\\n",
        "`\n",
        "\n",
        " ",
        "\t",
        "$",
        "${",
        "}",
        ":-",
        ":+",
        "\"",
        "'",
        "[",
        "]",
        "\"a\",",
        "=",
        "<<",
        "<<-EOF",
        "EOF\n",
        "..",
        "/",
        "--chown=",
        "--from=x",
        "AS ",
        "é",
        "\u{0}",
        "\r\n",
        "#",
        "8080/udp",
        "http://",
        "*",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..4000u32 {
        let len = (rng.next() % 64) as usize;
        let text = if round % 4 == 3 {
            // A realistic Dockerfile with a few characters replaced, dropped or cut short.
            let mut chars: Vec<char> = REALISTIC.chars().collect();
            for _ in 0..1 + rng.next() % 4 {
                let at = (rng.next() % chars.len() as u64) as usize;
                match rng.next() % 3 {
                    0 => {
                        const SPECIAL: &[u8] = b" \\\n\"'$`{}[]<#";
                        chars[at] =
                            char::from(SPECIAL[(rng.next() % SPECIAL.len() as u64) as usize]);
                    }
                    1 => {
                        chars.remove(at);
                    }
                    _ => chars.truncate(at),
                }
                if chars.is_empty() {
                    break;
                }
            }
            chars.into_iter().collect()
        } else if round.is_multiple_of(2) {
            let bytes: Vec<u8> = (0..len * 4).map(|_| rng.next() as u8).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            let mut s = String::new();
            if rng.next().is_multiple_of(2) {
                s.push_str("FROM a\n");
            }
            for _ in 0..len {
                s.push_str(PIECES[(rng.next() % PIECES.len() as u64) as usize]);
            }
            s
        };
        let build = args(&[("A", "x"), ("B", "$A")]);
        // Ok or Err are both fine; a panic fails the test.
        let _ = parse(&text, &build);
    }
}
