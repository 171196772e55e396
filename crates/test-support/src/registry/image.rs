//! Images made for the registry: an [`ImageBuilder`] writes layers into an OCI layout with `umoci`
//! (busybox roots, random files, a configuration), a [`TestImage`] pushes it and names its digests.

use super::*;

/// An OCI image layout the test built (see [`ImageBuilder`]), removed on drop.
pub struct TestImage {
    pub(super) dir: TempDir,
    pub(super) tag: String,
    pub(super) scratch: AtomicU32,
    /// `(platform, manifest digest)` of each manifest of an image index; empty for one manifest.
    pub(super) platforms: Vec<(String, String)>,
}

impl TestImage {
    /// The OCI image layout directory (`oci-layout`, `index.json`, `blobs/`).
    pub fn layout(&self) -> PathBuf {
        self.dir.path().join("oci")
    }

    /// The image's tag in its layout.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The image as a containers-image reference: `oci:<layout>:<tag>`.
    pub fn oci_ref(&self) -> String {
        format!("oci:{}:{}", self.layout().display(), self.tag)
    }

    /// A fresh path in the image's temp dir.
    pub(super) fn scratch_path(&self, name: &str) -> PathBuf {
        let n = self.scratch.fetch_add(1, Ordering::Relaxed);
        self.dir.path().join(format!("{name}-{n}"))
    }

    /// The digest of the image's manifest (`sha256:...`; its index's, for a multi-platform image), as a
    /// registry it is pushed to names it.
    pub fn manifest_digest(&self) -> String {
        self.inspect_format("{{.Digest}}").trim().to_string()
    }

    /// For an image made by [`ImageBuilder::build_index`], each platform (`os/arch[/variant]`) with its
    /// manifest's digest, in the index's order; empty for a single-manifest image.
    pub fn platform_manifests(&self) -> &[(String, String)] {
        &self.platforms
    }

    /// The digests of the image's layers (compressed, as pushed), bottom first (for a multi-platform
    /// image, those of the manifest skopeo picks for this machine's platform).
    pub fn layer_digests(&self) -> Vec<String> {
        self.inspect_format("{{range .Layers}}{{println .}}{{end}}")
            .lines()
            .filter(|line| !line.is_empty())
            .map(str::to_string)
            .collect()
    }

    fn inspect_format(&self, format: &str) -> String {
        let out = run(skopeo()
            .args(["inspect", "--format", format])
            .arg(self.oci_ref()));
        String::from_utf8(out).expect("skopeo inspect prints UTF-8")
    }

    /// A tar of the OCI layout (`oci-layout`, `index.json`, `blobs/` at its top; what skopeo's
    /// `oci-archive:` transport reads), in the image's temp dir: a fresh file on every call.
    pub fn oci_archive(&self) -> PathBuf {
        let archive = self.scratch_path("oci-archive").with_extension("tar");
        run(Command::new("tar")
            .arg("-C")
            .arg(self.layout())
            .arg("-cf")
            .arg(&archive)
            .args(["oci-layout", "index.json", "blobs"]));
        archive
    }

    /// A `docker save`-style archive of the image, named `repo_tag` inside (`skopeo copy ...
    /// docker-archive:<file>:<repo_tag>`), in the image's temp dir: a fresh file on every call. Like
    /// docker, skopeo writes a name without a registry host as `docker.io/<repo_tag>` in the archive's
    /// `manifest.json`. The archive holds a docker manifest and uncompressed layers, so neither its
    /// manifest digest nor its layer digests are this image's (the layers' diff ids are). A
    /// multi-platform image is archived as the manifest skopeo picks for this machine's platform.
    pub fn docker_archive(&self, repo_tag: &str) -> PathBuf {
        let archive = self.scratch_path("docker-archive").with_extension("tar");
        run(skopeo()
            .args(["copy", "--quiet"])
            .arg(self.oci_ref())
            .arg(format!("docker-archive:{}:{repo_tag}", archive.display())));
        archive
    }
}

/// Writes one layer's changes into the image's root (the merged root of the layers below).
pub(super) type LayerFn = Box<dyn FnOnce(&Path)>;

/// Builds a [`TestImage`] with `umoci`: each [`layer`](Self::layer) is one layer, made by unpacking the
/// image so far (`umoci unpack --rootless`), letting the closure change the root, and repacking the
/// difference (`umoci repack`; a deleted file becomes a whiteout). The configuration is applied once, at
/// [`build`](Self::build).
pub struct ImageBuilder {
    pub(super) tag: String,
    pub(super) layers: Vec<LayerFn>,
    pub(super) env: Vec<String>,
    pub(super) workdir: Option<String>,
    pub(super) user: Option<String>,
    pub(super) entrypoint: Option<Vec<String>>,
    pub(super) cmd: Option<Vec<String>>,
}

impl Default for ImageBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ImageBuilder {
    /// An image with no layers and an empty configuration (`FROM scratch`).
    pub fn new() -> Self {
        ImageBuilder {
            tag: "latest".to_string(),
            layers: Vec::new(),
            env: Vec::new(),
            workdir: None,
            user: None,
            entrypoint: None,
            cmd: None,
        }
    }

    /// A busybox image: one layer with the static `/bin/busybox` and a symlink to it for every applet
    /// it has under `/bin` (`sh`, `ls`, `cat`, `echo`, `id`, `env`, `dd`, `sleep`, ...), `/etc/passwd`
    /// and `/etc/group` with root, `/root`, and `/tmp` (mode 1777); `PATH` set and `sh` as the command.
    pub fn busybox() -> Self {
        let busybox = tool("busybox");
        Self::new()
            .layer(move |root| busybox_root(&busybox, root))
            .env("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            .cmd(&["sh"])
    }

    /// The tag the image has in its layout (default `latest`).
    pub fn tag(mut self, tag: &str) -> Self {
        self.tag = tag.to_string();
        self
    }

    /// Adds one layer: `write` gets the root as the layers below left it and changes it.
    pub fn layer(mut self, write: impl FnOnce(&Path) + 'static) -> Self {
        self.layers.push(Box::new(write));
        self
    }

    /// Adds `n` small layers, the i-th (from 0) holding `/layers/<i>` with the text `layer <i>`.
    pub fn layers(mut self, n: usize) -> Self {
        for i in 0..n {
            self = self.layer(move |root| {
                let dir = root.join("layers");
                std::fs::create_dir_all(&dir).expect("create /layers");
                std::fs::write(dir.join(i.to_string()), format!("layer {i}\n"))
                    .expect("write a layer's file");
            });
        }
        self
    }

    /// Adds one layer holding `path` (absolute in the image) with `size` random bytes from
    /// `/dev/urandom`: incompressible, so the pushed layer is about `size` bytes too (for pull
    /// benchmarks; call it again for more layers).
    pub fn random_file(self, path: &str, size: u64) -> Self {
        let path = path.trim_start_matches('/').to_string();
        self.layer(move |root| {
            let target = root.join(&path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).expect("create a random file's directory");
            }
            let mut random = File::open("/dev/urandom")
                .expect("open /dev/urandom")
                .take(size);
            let mut file = File::create(&target)
                .unwrap_or_else(|e| panic!("create {}: {e}", target.display()));
            let copied = std::io::copy(&mut random, &mut file).expect("copy random bytes");
            assert_eq!(copied, size, "short read from /dev/urandom");
        })
    }

    /// Sets `KEY=VALUE` in the configuration's environment (replacing an earlier `KEY`).
    pub fn env(mut self, key_value: &str) -> Self {
        let key = key_value.split('=').next().unwrap_or_default();
        self.env
            .retain(|kv| kv.split('=').next().unwrap_or_default() != key);
        self.env.push(key_value.to_string());
        self
    }

    /// Sets the configuration's working directory.
    pub fn workdir(mut self, dir: &str) -> Self {
        self.workdir = Some(dir.to_string());
        self
    }

    /// Sets the configuration's user (`name`, `uid`, `uid:gid`, ...).
    pub fn user(mut self, user: &str) -> Self {
        self.user = Some(user.to_string());
        self
    }

    /// Sets the configuration's entrypoint.
    pub fn entrypoint(mut self, args: &[&str]) -> Self {
        self.entrypoint = Some(args.iter().map(|a| a.to_string()).collect());
        self
    }

    /// Sets the configuration's command (the entrypoint's arguments, or the program without one).
    pub fn cmd(mut self, args: &[&str]) -> Self {
        self.cmd = Some(args.iter().map(|a| a.to_string()).collect());
        self
    }

    /// Makes the image: `umoci init` and `new`, one unpack/change/repack per layer, one `umoci config`,
    /// then `umoci gc` so the layout holds only the final image's blobs.
    pub fn build(self) -> TestImage {
        let umoci = tool("umoci");
        let image = TestImage {
            dir: temp_dir("sandboxd-test-image-"),
            tag: self.tag.clone(),
            scratch: AtomicU32::new(0),
            platforms: Vec::new(),
        };
        let layout = image.layout();
        let image_arg = format!("{}:{}", layout.display(), self.tag);
        run(Command::new(&umoci)
            .arg("init")
            .arg("--layout")
            .arg(&layout));
        run(Command::new(&umoci).args(["new", "--image", &image_arg]));
        for write in self.layers {
            let bundle = image.scratch_path("bundle");
            run(Command::new(&umoci)
                .args(["unpack", "--rootless", "--image", &image_arg])
                .arg(&bundle));
            write(&bundle.join("rootfs"));
            run(Command::new(&umoci)
                .args(["repack", "--image", &image_arg])
                .arg(&bundle));
            std::fs::remove_dir_all(&bundle)
                .unwrap_or_else(|e| panic!("remove {}: {e}", bundle.display()));
        }
        let mut config = Command::new(&umoci);
        config.args(["config", "--image", &image_arg]);
        for kv in &self.env {
            config.arg(format!("--config.env={kv}"));
        }
        if let Some(dir) = &self.workdir {
            config.arg(format!("--config.workingdir={dir}"));
        }
        if let Some(user) = &self.user {
            config.arg(format!("--config.user={user}"));
        }
        for (field, args) in [("entrypoint", &self.entrypoint), ("cmd", &self.cmd)] {
            if let Some(args) = args {
                config.arg(format!("--clear=config.{field}"));
                for arg in args {
                    config.arg(format!("--config.{field}={arg}"));
                }
            }
        }
        run(&mut config);
        run(Command::new(&umoci).arg("gc").arg("--layout").arg(&layout));
        image
    }
}

impl ImageBuilder {
    /// Makes a multi-platform image: [`build`](Self::build)s it, then tags it as an OCI image index with
    /// one manifest per platform of `platforms` (`os/arch[/variant]`, e.g. `["linux/amd64",
    /// "linux/arm64"]`), each with the same layers (this machine's busybox, whatever the label says) and
    /// a config whose `os` and `architecture` are the platform's (a variant is named only in the
    /// index). [`TestImage::platform_manifests`] lists the manifests' digests.
    pub fn build_index(self, platforms: &[&str]) -> TestImage {
        assert!(!platforms.is_empty(), "an image index needs a platform");
        let umoci = tool("umoci");
        let mut image = self.build();
        let layout = image.layout();
        let mut entries = Vec::new();
        for (i, platform) in platforms.iter().enumerate() {
            let mut parts = platform.split('/');
            let (Some(os), Some(arch), variant, None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                panic!("a platform is os/arch[/variant], not {platform:?}");
            };
            let tag = format!("{}-platform-{i}", image.tag);
            run(Command::new(&umoci)
                .args(["config", "--no-history"])
                .arg(format!("--image={}:{}", layout.display(), image.tag))
                .arg(format!("--tag={tag}"))
                .arg(format!("--os={os}"))
                .arg(format!("--architecture={arch}")));
            let manifest = run(skopeo()
                .args(["inspect", "--raw"])
                .arg(format!("oci:{}:{tag}", layout.display())));
            let digest = format!("sha256:{}", sha256_hex(&manifest));
            let variant = variant
                .map(|v| format!(r#","variant":"{v}""#))
                .unwrap_or_default();
            entries.push(format!(
                r#"{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{digest}","size":{},"platform":{{"architecture":"{arch}","os":"{os}"{variant}}}}}"#,
                manifest.len()
            ));
            image.platforms.push((platform.to_string(), digest));
        }
        let index = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{}]}}"#,
            entries.join(",")
        );
        let index_hex = sha256_hex(index.as_bytes());
        std::fs::write(layout.join("blobs/sha256").join(&index_hex), &index)
            .expect("write the image index blob");
        // The layout names only the index now; gc drops the single-platform image built first.
        std::fs::write(
            layout.join("index.json"),
            format!(
                r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"sha256:{index_hex}","size":{},"annotations":{{"org.opencontainers.image.ref.name":"{}"}}}}]}}"#,
                index.len(),
                image.tag
            ),
        )
        .expect("write the layout's index.json");
        run(Command::new(&umoci).arg("gc").arg("--layout").arg(&layout));
        image
    }
}

/// The SHA-256 of `bytes` in hex, by `sha256sum` (which keeps a hash crate out of this crate's
/// dependencies).
pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running sha256sum: {e}"));
    child
        .stdin
        .take()
        .expect("sha256sum's stdin")
        .write_all(bytes)
        .expect("write to sha256sum");
    let output = child.wait_with_output().expect("wait for sha256sum");
    assert!(
        output.status.success(),
        "sha256sum failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let out = String::from_utf8_lossy(&output.stdout);
    out.split_whitespace()
        .next()
        .filter(|hex| hex.len() == 64)
        .unwrap_or_else(|| panic!("sha256sum printed {out:?}"))
        .to_string()
}

/// Writes busybox's root into `root`: see [`ImageBuilder::busybox`].
pub(super) fn busybox_root(busybox: &Path, root: &Path) {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let bin = root.join("bin");
    for dir in ["bin", "etc", "root", "tmp"] {
        std::fs::create_dir_all(root.join(dir)).expect("create a busybox root directory");
    }
    std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777))
        .expect("make /tmp sticky and world-writable");
    std::fs::copy(busybox, bin.join("busybox")).expect("copy busybox into the image");
    let list = run(Command::new(busybox).arg("--list"));
    for applet in String::from_utf8_lossy(&list).lines() {
        if applet != "busybox" && !bin.join(applet).exists() {
            symlink("busybox", bin.join(applet)).expect("link a busybox applet");
        }
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")
        .expect("write /etc/passwd");
    std::fs::write(root.join("etc/group"), "root:x:0:\n").expect("write /etc/group");
}
