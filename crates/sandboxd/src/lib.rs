//! The daemon: wires store, runtime, service, proxy and API together and serves them on one listener
//! (and, with `--tls-listen`, the same router over TLS, plus the object store: [`tls`]).
//!
//! Start-up order: data dir → store (migrations) → admin token → runtime (template, host checks) →
//! adoption of sandboxes a previous daemon left running (one pass of the reconcilers, which then run
//! every `--reconcile-interval-secs`) → the callback socket sandboxes' agents report readiness to
//! ([`callback`]) → webhook sender (drains the outbox) → listener. Shutdown
//! (SIGTERM, SIGINT) stops accepting and drains requests; sandboxes keep running and are adopted by the
//! next start.

pub mod backup;
pub mod callback;
pub mod cluster;
pub mod config;
pub mod config_file;
pub mod core_dumps;
pub mod doctor;
pub mod gateway;
pub mod identity;
pub mod mcp;
pub mod open_files;
pub mod telemetry;
pub mod tls;

use anyhow::Context;
use axum::serve::ListenerExt;
use config::{Cli, Command, ConfigCommand, ServeConfig};
use sandboxd_api::{auth::Auth, metrics::Metrics};
use sandboxd_images::{LayerStore, Registry};
use sandboxd_runtime::gvisor::{GvisorConfig, GvisorRuntime};
use sandboxd_runtime::namespace::{NamespaceConfig, NamespaceRuntime};
use sandboxd_runtime::quota::{DiskBackend, DiskConfig};
use sandboxd_runtime::tiers::Tiers;
use sandboxd_service::images::ImageSettings;
use sandboxd_service::{Service, ServiceConfig};
use sandboxd_store::{unix_millis_now, Store, StoreConfig};

/// Where the TLS listener serves the object store (Daytona's build contexts).
pub const OBJECT_STORAGE_PATH: &str = "/object-storage";
/// The secrets key's file in the data dir, unless `--secrets-key-file` names another.
pub const SECRETS_KEY_FILE: &str = "secrets.key";
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Reads `argv` with the config file `serve` and `config show` take, then runs it. A command line
/// or a file it cannot read ends the process with status 2, saying why.
pub fn main(argv: Vec<std::ffi::OsString>) -> ExitCode {
    let with_file: &[&[&str]] = &[
        &["serve"],
        &["config", "show"],
        &["doctor"],
        &["backup"],
        &["restore"],
    ];
    let loaded = match config_file::load::<Cli>(argv, with_file) {
        Ok(loaded) => loaded,
        Err(config_file::ConfigError::Cli(e)) => e.exit(),
        Err(e) => {
            eprintln!("sandboxd: {}", sandboxd_errors::chain(&e));
            return ExitCode::from(2);
        }
    };
    if let Command::Config(ConfigCommand::Show(show)) = &loaded.parsed.command {
        // Only `config show`'s matches hold every `serve` flag to report on.
        let settings = config_file::effective::<Cli>(&loaded);
        return show_config(&settings, loaded.file.as_deref(), show.json);
    }
    let mut cli = loaded.parsed;
    match &mut cli.command {
        // Answered above, before `loaded` was taken apart.
        Command::Config(ConfigCommand::Show(_)) => {}
        Command::Doctor(doctor) => return run_doctor(&doctor.serve, doctor.json),
        Command::Backup(b) => {
            let layers = if b.with_layers {
                backup::Layers::Carried
            } else {
                backup::Layers::ByReference
            };
            return finish(backup::backup(&b.serve.data_dir, &b.to, layers).map(|w| {
                let layers = match layers {
                    backup::Layers::Carried => "its layers".to_string(),
                    backup::Layers::ByReference => format!(
                        "{} layer(s) named, not carried (restore --layers-from)",
                        w.referenced_layers
                    ),
                };
                format!(
                    "wrote {} ({} bytes): the store (schema {}), {} volume(s), {layers}",
                    w.path.display(),
                    w.bytes,
                    w.schema,
                    w.volumes
                )
            }));
        }
        Command::Restore(r) => {
            let restored = backup::restore(&r.from, &r.serve.data_dir, r.layers_from.as_deref());
            return finish(restored.map(|done| {
                format!(
                    "restored {} into {}: the store (schema {}), {} volume(s), {} layer(s) from \
                     --layers-from; start the daemon on it",
                    r.from.display(),
                    r.serve.data_dir.display(),
                    done.schema,
                    done.volumes,
                    done.layers
                )
            }));
        }
        Command::Serve(serve) => serve.config = loaded.file,
        Command::Mcp(_) => {}
    }
    run(cli)
}

/// Prints what a one-shot command did, or why it failed (status 1).
fn finish(done: anyhow::Result<String>) -> ExitCode {
    match done {
        Ok(said) => {
            println!("{said}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sandboxd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `sandboxd doctor`.
fn run_doctor(config: &ServeConfig, json: bool) -> ExitCode {
    use std::io::Write;
    let checks = doctor::run(config);
    let text = if json {
        doctor::to_json(&checks).to_string() + "\n"
    } else {
        doctor::render(&checks)
    };
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    doctor::exit_code(&checks)
}

/// `sandboxd config show`.
fn show_config(settings: &[config_file::Setting], file: Option<&Path>, json: bool) -> ExitCode {
    use std::io::Write;
    // A reader that goes away early (`| head`) is no failure.
    if !json {
        let _ = write!(
            std::io::stdout().lock(),
            "{}",
            config_file::render_toml(settings, file)
        );
        return ExitCode::SUCCESS;
    }
    let settings: Vec<serde_json::Value> = settings
        .iter()
        .map(|s| {
            let value = match &s.values {
                None => serde_json::json!("********"),
                Some(v) if s.source == config_file::Source::Unset => serde_json::Value::Null,
                Some(v) if v.len() == 1 => serde_json::json!(v[0]),
                Some(v) => serde_json::json!(v),
            };
            serde_json::json!({"key": s.key, "value": value, "source": s.source.as_str()})
        })
        .collect();
    let out = serde_json::json!({"file": file, "settings": settings});
    let _ = writeln!(std::io::stdout().lock(), "{out}");
    ExitCode::SUCCESS
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    let (json, otlp) = match &cli.command {
        Command::Serve(serve) => (serve.log_format == "json", serve.otlp_endpoint.as_deref()),
        _ => (false, None),
    };
    // Flushes the last traces when `run` returns.
    let _telemetry = match telemetry::init(json, otlp) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("sandboxd: {}", sandboxd_errors::chain(&e));
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandboxd: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Reads FAILPOINTS; a no-op unless built with the `failpoints` feature.
    let _failpoints = fail::FailScenario::setup();
    let result = match cli.command {
        Command::Serve(config) => runtime.block_on(serve(*config)),
        Command::Mcp(config) => runtime.block_on(mcp::run(config)),
        // Answered by `main` before any runtime exists.
        Command::Config(_) | Command::Doctor(_) | Command::Backup(_) | Command::Restore(_) => Err(
            anyhow::anyhow!("one-shot commands are answered by sandboxd::main"),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sandboxd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Reads the admin token: `SB_PAT_TOKEN`, else the one saved in the data dir, else a new one that is
/// saved (mode 0600) and printed once.
fn admin_token(data_dir: &Path) -> anyhow::Result<String> {
    if let Ok(token) = std::env::var("SB_PAT_TOKEN") {
        if !token.is_empty() {
            return Ok(token);
        }
    }
    let path = data_dir.join("admin-token");
    match std::fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => return Ok(token.trim().to_string()),
        _ => {}
    }
    let token = format!("sb_{}", sandboxd_service::sandboxes::random_id("", 40));
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(file, "{token}")?;
    println!("admin token (saved to {}): {token}", path.display());
    Ok(token)
}

/// `sandboxd serve`.
pub async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    if let Some(file) = &config.config {
        tracing::info!(file = %file.display(), "read the config file");
    }
    if let Err(e) = core_dumps::forbid() {
        tracing::warn!(error = %e, "could not turn off core files of the daemon");
    }
    match open_files::raise() {
        Ok((before, now)) if before < now => {
            tracing::info!(
                before,
                now,
                "raised the limit on open files to the hard limit"
            )
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "could not raise the limit on open files"),
    }
    // What `sandboxd doctor` would say of this host, in the log, off the start-up path (the listen
    // address is this daemon's to take, not a check).
    let host = config.clone();
    std::thread::spawn(move || {
        let checks: Vec<_> = doctor::host_checks(&host)
            .into_iter()
            .filter(|c| c.name != "listen")
            .collect();
        doctor::log(&checks);
        tracing::info!(summary = %doctor::summary(&checks), "host checks (sandboxd doctor for all)");
    });
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&config.data_dir)
        .with_context(|| format!("creating data dir {}", config.data_dir.display()))?;
    let data_dir = std::fs::canonicalize(&config.data_dir)?;
    let daemon_id = identity::daemon_id(&data_dir)?;
    let (store, _writer_thread) = Store::open(data_dir.join("sandboxd.db"), StoreConfig::default())
        .context("opening the store")?;
    let token = admin_token(&data_dir)?;
    let stored = token.clone();
    let admin_id = store
        .writer()
        .write(move |tx| tx.import_api_token("admin", &stored, unix_millis_now()))
        .await
        .context("recording the admin token")?;
    let agent = config.agent_binary().context(
        "no sandboxd-agent binary found: build it with scripts/build-agent or pass --agent-bin",
    )?;
    let mut runtime_config = NamespaceConfig::new(data_dir.join("runtime"), agent);
    // No pull runs yet: whatever an interrupted one left in staging goes now.
    let layers = LayerStore::open(data_dir.join("images"), runtime_config.id_map_base)
        .context("opening the layer store")?;
    let cleared = layers
        .clear_staging()
        .context("clearing the layer store's staging")?;
    if cleared > 0 {
        tracing::info!(cleared, "removed what interrupted pulls left");
    }
    let images = ImageSettings {
        registry: Registry::new(config.registry()?),
        layers,
    };
    runtime_config.cgroup_parent = config.cgroup_parent.clone();
    runtime_config.ifname_prefix = sandboxd_runtime::namespace::ifname_prefix(&daemon_id);
    runtime_config.dns_upstreams = config.dns_upstreams.clone();
    runtime_config.disk = DiskConfig {
        mode: config.disk_backend,
        pool_file_mb: config.disk_pool_mb,
    };
    let callback_dir = callback::prepare_dir(&data_dir)?;
    runtime_config.callback_dir = Some(callback_dir.clone());
    let gateway = gateway::prepare(
        &data_dir,
        &callback_dir,
        config.egress_gateway_port,
        &config.host_ports()?,
        config.egress_roots.as_deref(),
    )
    .await?;
    runtime_config.slots = config
        .net_slot_base
        .checked_add(config.net_slots)
        .context("--net-slot-base + --net-slots overflows")?;
    let namespace = Arc::new(
        NamespaceRuntime::new(runtime_config)
            .await
            .context("starting the namespace runtime")?,
    );
    let gvisor = gvisor_tier(&config, &namespace)?;
    let runtime = Tiers::new(namespace, gvisor);
    for tier in sandboxd_runtime::Isolation::ALL {
        match sandboxd_runtime::Runtime::offers(&runtime, tier) {
            Ok(()) => tracing::info!(isolation = %tier, "isolation tier offered"),
            Err(why) => {
                tracing::info!(isolation = %tier, reason = %why, "isolation tier not offered")
            }
        }
    }
    sandboxd_runtime::Runtime::offers(&runtime, config.default_isolation)
        .context("--default-isolation names a tier this host cannot offer")?;
    let reclaimed = runtime
        .namespace()
        .reclaim_orphans()
        .await
        .context("reclaiming the host interfaces this daemon's sandboxes left")?;
    if !reclaimed.is_empty() {
        tracing::info!(slots = ?reclaimed, "removed host interfaces no sandbox of this daemon runs on");
    }
    // The object store build contexts are uploaded to, served where the SDKs reach it: over TLS.
    let objects = match config.tls_listen {
        Some(addr) => Some(sandboxd_service::contexts::ObjectStorage {
            store: sandboxd_objects::ObjectStore::open(&data_dir.join("objects"))
                .context("opening the object store")?,
            tls_port: addr.port(),
            path: OBJECT_STORAGE_PATH.to_string(),
        }),
        None => None,
    };
    let secrets_key = match &config.secrets_key_file {
        Some(path) => sandboxd_secrets::SecretKey::load(path),
        None => sandboxd_secrets::SecretKey::load_or_create(&data_dir.join(SECRETS_KEY_FILE)),
    }
    .context("loading the secrets key")?;
    let disk_backend = runtime.namespace().disk_backend();
    tracing::info!(?disk_backend, "disk quota backend");
    let service = Service::new(
        ServiceConfig {
            domain: config.domain.clone(),
            public_port: config.listen.port(),
            default_timeout: Duration::from_secs(config.default_timeout),
            net_slots: config.net_slots,
            net_slot_base: config.net_slot_base,
            host_ports: config.host_ports()?,
            forward_ip: config.listen.ip(),
            idempotency_pending_ttl: Duration::from_millis(config.idempotency_pending_ttl_ms),
            idempotency_replay_ttl: Duration::from_secs(config.idempotency_replay_ttl_secs),
            allow_wildcard_domains: config.allow_wildcard_domains,
            reconcile_deadline: Duration::from_secs(config.reconcile_deadline_secs),
            ready_deadline: Duration::from_millis(config.ready_timeout_ms.max(1)),
            images: Some(images),
            objects: objects.clone(),
            secrets_key: Some(secrets_key),
            egress_gateway: Some(gateway.settings.clone()),
            disk_quota: disk_backend != DiskBackend::Off,
            default_disk_mb: config.default_disk_mb,
            max_disk_mb: config.max_disk_mb,
            image_cache_max_mb: config.image_cache_max_mb,
            ready_cmd_timeout: Duration::from_secs(config.ready_cmd_timeout_secs),
            default_isolation: config.default_isolation,
            usage_sample_every: Duration::from_millis(config.metrics_interval_ms.max(1)),
            key_limits: sandboxd_service::per_key::KeyLimits {
                max_sandboxes: config.max_sandboxes_per_key,
                max_concurrent_creates: config.max_concurrent_creates_per_key,
            },
            ..ServiceConfig::default()
        },
        store.writer().clone(),
        store.reader().clone(),
        Arc::new(runtime),
    );
    let adoption = service
        .adopt()
        .await
        .context("adopting running sandboxes")?;
    let forwarders = service
        .reinstall_forwarders()
        .await
        .context("reinstalling TCP forwarders")?;
    tracing::info!(?adoption, forwarders, "store and runtime reconciled");
    // The terminals an earlier daemon served died with it: their processes are ended behind.
    tokio::spawn({
        let service = service.clone();
        async move { service.end_terminals_of_earlier_daemons().await }
    });
    // After adoption: a `starting` sandbox a previous daemon left has no create waiting for it and was
    // failed above; its agent's retry, if any, is refused.
    let callbacks = callback::serve(&callback_dir, service.clone())?;
    let egress = gateway::serve(gateway, service.clone());
    // Pooled sandboxes call home like any other, so the pools fill once the callbacks are served.
    let warm_pools = {
        let (service, sizes) = (service.clone(), config.warm_pools.clone());
        tokio::spawn(async move { service.run_warm_pools(&sizes).await })
    };
    // Cluster mode: the node joins before the API serves, so the router forwards from the first
    // request on.
    let capacity = match cluster::start(&config, &data_dir).await? {
        Some(node) => {
            service.attach_cluster(node.clone());
            Some(tokio::spawn(cluster::report_capacity(
                node,
                service.clone(),
                data_dir.clone(),
            )))
        }
        None => None,
    };
    let proxy = Arc::new(sandboxd_proxy::Proxy::new(
        config.domain.clone(),
        Arc::new(sandboxd_service::domains::DomainResolver(service.clone())),
    ));
    let app = sandboxd_api::router(
        service.clone(),
        Auth::new(service.clone(), &token, admin_id),
        Metrics::default(),
        proxy,
    );
    // No Nagle: an answer leaves in several writes (head, body frames), and a small write held back
    // for the client's delayed ACK costs up to 40 ms a request.
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?
        .tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
    let tls = match config.tls_listen {
        Some(addr) => {
            let mut tls_app = app.clone();
            if let Some(objects) = &objects {
                tls_app = tls_app.nest_service(
                    OBJECT_STORAGE_PATH,
                    sandboxd_objects::s3::router(objects.store.clone()),
                );
            }
            let serving = tls::listen(addr, data_dir.join("certs"), tls_app).await?;
            tracing::info!(tls_listen = %addr, "serving TLS (certificates by SNI from <data-dir>/certs)");
            Some(tokio::spawn(serving))
        }
        None => None,
    };
    let sweeper = tokio::spawn(sweep(
        service.clone(),
        Duration::from_millis(config.sweep_interval_ms),
    ));
    let usage_sampler = (config.metrics_interval_ms > 0).then(|| {
        tokio::spawn(record_usage(
            service.clone(),
            Duration::from_millis(config.metrics_interval_ms),
        ))
    });
    let reconciler = (config.reconcile_interval_secs > 0).then(|| {
        tokio::spawn(reconcile(
            service.clone(),
            Duration::from_secs(config.reconcile_interval_secs),
        ))
    });
    let webhook_sender = {
        let service = service.clone();
        let sender = sandboxd_service::webhooks::SenderConfig {
            poll: Duration::from_millis(config.webhook_poll_ms.max(1)),
            timeout: Duration::from_secs(config.webhook_timeout_secs.max(1)),
            tail_delay: Duration::from_secs(config.webhook_tail_secs.max(1)),
            max_total: Duration::from_secs(config.webhook_max_total_secs),
            ..Default::default()
        };
        tokio::spawn(async move { service.run_webhook_sender(sender).await })
    };
    tracing::info!(listen = %config.listen, data_dir = %data_dir.display(), daemon_id = %daemon_id, "sandboxd ready");
    println!("sandboxd listening on http://{}", config.listen);
    // Under systemd (`Type=notify`): started once the listener takes connections.
    notify_systemd(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&format!("serving on {}", config.listen)),
    ]);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            shutdown_signal().await;
            notify_systemd(&[sd_notify::NotifyState::Stopping]);
        })
        .await
        .context("serving")?;
    sweeper.abort();
    webhook_sender.abort();
    callbacks.abort();
    egress.abort();
    warm_pools.abort();
    if let Some(sampler) = usage_sampler {
        sampler.abort();
    }
    if let Some(reconciler) = reconciler {
        reconciler.abort();
    }
    if let Some(capacity) = capacity {
        capacity.abort();
    }
    if let Some(node) = service.cluster() {
        node.shutdown().await;
    }
    if let Some(tls) = tls {
        tls.abort();
    }
    tracing::info!("sandboxd stopped; sandboxes keep running");
    Ok(())
}

/// Tells the service manager (`NOTIFY_SOCKET`, set by systemd for `Type=notify`) `states`; nothing
/// without one.
fn notify_systemd(states: &[sd_notify::NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "cannot notify the service manager");
    }
}

async fn sweep(service: Service, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = service.sweep_expired().await {
            tracing::warn!(error = %sandboxd_service::error::chain(&e), "expiry sweep failed");
        }
    }
}

/// Samples the usage of sandboxes in use every `every` (`Service::record_usage`).
async fn record_usage(service: Service, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        service.record_usage().await;
    }
}

/// Runs the reconcilers every `every` (the first pass was adoption, at start-up).
async fn reconcile(service: Service, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let report = service.reconcile_all().await;
        tracing::debug!(actions = report.total_actions(), "reconcile pass");
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// The gVisor tier on `namespace`'s machinery, or why this host has none (not an error: the daemon
/// then offers the namespace tier alone).
fn gvisor_tier(
    config: &ServeConfig,
    namespace: &Arc<NamespaceRuntime>,
) -> anyhow::Result<Result<GvisorRuntime, String>> {
    let wanted = GvisorConfig {
        runsc: config.runsc.clone(),
        ..GvisorConfig::default()
    };
    Ok(match sandboxd_runtime::gvisor::probe(&wanted) {
        Ok(runsc) => Ok(
            GvisorRuntime::new(namespace.clone(), runsc).context("preparing the gVisor tier")?
        ),
        Err(why) => Err(why),
    })
}
