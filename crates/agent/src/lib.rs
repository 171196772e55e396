//! The in-sandbox agent.
//!
//! One static binary with two jobs:
//! - [`boot`]: as PID 1 of a fresh set of namespaces, finish building the sandbox (rootfs, user namespace,
//!   confinement) in the handshake the runtime drives, then become the sandbox's init.
//! - [`server`]: serve the envd protocol (the E2B SDK's in-sandbox API) on the listening socket the runtime
//!   handed over, behind the sandbox's access token.
//!
//! [`callhome`] reports to the daemon once the server answers (`environment-ready`), or that it cannot
//! (`environment-failed`).
//!
//! [`interpreter`] is a third, separate job of the same binary: E2B's code interpreter on Jupyter
//! kernels, started inside a sandbox by the templates that carry it.
//!
//! [`tool`] is the small file machinery the daemon's sessions run with this binary inside a sandbox,
//! so that they need nothing of the image.
//!
//! [`prebuilt`] is PID 1 of a sandbox its runtime built whole (the gVisor tier): no handshake, the
//! configuration on standard input, then the same server.
//!
//! [`init`] is the PID 1 loop that ties them together: it reaps every zombie and forwards termination
//! signals to the server. [`confine`] holds the seccomp filter and capability set every sandbox process
//! runs under.

pub mod boot;
pub mod callhome;
pub mod confine;
pub mod init;
pub mod interpreter;
pub mod prebuilt;
pub mod server;
pub mod tool;
