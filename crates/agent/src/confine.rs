//! The confinement every sandbox process runs under: `no_new_privs`, a Docker-like capability set, and
//! a seccomp filter that refuses the syscalls a sandbox could use to reach the kernel or the host.
//!
//! Contract:
//! - Applied once by `boot`, in this order, right before the process becomes the sandbox's init:
//!   [`set_no_new_privs`], [`drop_capabilities`], [`install_seccomp`]. All three are irreversible and
//!   inherited by every descendant.
//! - [`drop_capabilities`] only ever narrows: afterwards no set (bounding, permitted, effective,
//!   inheritable) holds a capability outside [`KEEP`], and the ambient set is empty.
//! - [`install_seccomp`] allows every syscall by default and fails the escape syscalls with `EPERM`
//!   (namespace creation through `clone`/`unshare` included), `clone3` with `ENOSYS` (its flags sit
//!   behind a pointer a filter cannot read, so libc falls back to `clone`, as under Docker), and on
//!   x86_64 every x32-ABI syscall with `EPERM` (they would otherwise slip past the number checks).
//!   `personality` may only select Docker's personas (so no `ADDR_NO_RANDOMIZE`). A syscall from
//!   another architecture's ABI (i386 `int 0x80`) kills the process.
//! - `ptrace` and `process_vm_readv`/`writev` are allowed, as Docker allows them on Linux 4.8 and
//!   later (where tracing can no longer step around a seccomp filter; sandboxd needs newer kernels
//!   anyway): debuggers and `strace` work. They reach only the sandbox's own processes (its pid
//!   namespace), and without `CAP_SYS_PTRACE` only those of the same user, as the host's Yama allows.
//!
//! Assumes a single-threaded caller on x86_64 or aarch64 (the filter is synced to all threads anyway;
//! capabilities and `no_new_privs` are per thread).

use caps::{CapSet, Capability, CapsHashSet};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};
use std::collections::BTreeMap;

/// Capabilities a sandbox keeps (Docker's default set).
pub const KEEP: &[Capability] = &[
    Capability::CAP_CHOWN,
    Capability::CAP_DAC_OVERRIDE,
    Capability::CAP_FOWNER,
    Capability::CAP_FSETID,
    Capability::CAP_KILL,
    Capability::CAP_SETGID,
    Capability::CAP_SETUID,
    Capability::CAP_SETPCAP,
    Capability::CAP_NET_BIND_SERVICE,
    Capability::CAP_SYS_CHROOT,
    Capability::CAP_AUDIT_WRITE,
    Capability::CAP_SETFCAP,
    Capability::CAP_MKNOD,
    Capability::CAP_NET_RAW,
];

/// A confinement step that failed.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("cannot set no_new_privs")]
    NoNewPrivs(#[source] std::io::Error),
    #[error("cannot drop capability {index} from the bounding set")]
    Bounding {
        index: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot narrow the {set} capability set")]
    Capabilities {
        set: &'static str,
        #[source]
        source: caps::errors::CapsError,
    },
    #[error("no seccomp filter for architecture {0}")]
    UnsupportedArch(&'static str),
    #[error("cannot build the seccomp filter")]
    BuildFilter(#[source] seccompiler::BackendError),
    #[error("cannot install the seccomp filter")]
    InstallFilter(#[source] seccompiler::Error),
}

/// Sets `no_new_privs`: no later `execve` can gain privileges (setuid bits, file capabilities).
pub fn set_no_new_privs() -> Result<(), ConfineError> {
    // SAFETY: plain prctl with integer arguments.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(ConfineError::NoNewPrivs(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Drops every capability not in [`KEEP`] from the bounding, inheritable and ambient sets, and from
/// the permitted and effective sets too (the init does not `exec`, so those matter as much).
pub fn drop_capabilities() -> Result<(), ConfineError> {
    // The bounding set first: dropping from it needs CAP_SETPCAP in the effective set.
    drop_bounding()?;
    caps::clear(None, CapSet::Ambient).map_err(|source| ConfineError::Capabilities {
        set: "ambient",
        source,
    })?;
    // Effective before permitted: the effective set must stay a subset of the permitted one.
    for (set, name) in [
        (CapSet::Effective, "effective"),
        (CapSet::Permitted, "permitted"),
        (CapSet::Inheritable, "inheritable"),
    ] {
        let narrowed: CapsHashSet = caps::read(None, set)
            .map_err(|source| ConfineError::Capabilities { set: name, source })?
            .into_iter()
            .filter(|c| KEEP.contains(c))
            .collect();
        caps::set(None, set, &narrowed)
            .map_err(|source| ConfineError::Capabilities { set: name, source })?;
    }
    Ok(())
}

/// Drops by number up to the kernel's last capability, including ones newer than the `caps` crate.
fn drop_bounding() -> Result<(), ConfineError> {
    let keep: Vec<u32> = KEEP.iter().map(|c| u32::from(c.index())).collect();
    for index in 0..64u32 {
        // SAFETY: plain prctl with integer arguments.
        let present = unsafe { libc::prctl(libc::PR_CAPBSET_READ, index, 0, 0, 0) };
        if present < 0 {
            break; // EINVAL: past the last capability this kernel knows
        }
        if present == 0 || keep.contains(&index) {
            continue;
        }
        // SAFETY: plain prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, index, 0, 0, 0) } != 0 {
            return Err(ConfineError::Bounding {
                index,
                source: std::io::Error::last_os_error(),
            });
        }
    }
    Ok(())
}

/// Installs the seccomp filters on every thread of the process (this also sets `no_new_privs`).
pub fn install_seccomp() -> Result<(), ConfineError> {
    for program in filters()? {
        seccompiler::apply_filter_all_threads(&program).map_err(ConfineError::InstallFilter)?;
    }
    Ok(())
}

/// The compiled programs, in installation order.
fn filters() -> Result<Vec<BpfProgram>, ConfineError> {
    // The syscall table below covers these two; anywhere else a filter would be quietly incomplete.
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        return Err(ConfineError::UnsupportedArch(std::env::consts::ARCH));
    }
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|_| ConfineError::UnsupportedArch(std::env::consts::ARCH))?;
    let compile = |rules, action| -> Result<BpfProgram, ConfineError> {
        SeccompFilter::new(rules, SeccompAction::Allow, action, arch)
            .and_then(BpfProgram::try_from)
            .map_err(ConfineError::BuildFilter)
    };
    let mut programs = Vec::new();
    if let Some(x32) = x32_guard() {
        programs.push(x32);
    }
    programs.push(compile(
        deny_rules()?,
        SeccompAction::Errno(libc::EPERM as u32),
    )?);
    let clone3 = BTreeMap::from([(libc::SYS_clone3, vec![])]);
    programs.push(compile(clone3, SeccompAction::Errno(libc::ENOSYS as u32))?);
    Ok(programs)
}

/// Syscalls refused whatever their arguments.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn denied() -> Vec<libc::c_long> {
    use libc::*;
    let mut all = vec![
        SYS_keyctl,
        SYS_add_key,
        SYS_request_key,
        SYS_bpf,
        SYS_kexec_load,
        SYS_kexec_file_load,
        SYS_init_module,
        SYS_finit_module,
        SYS_delete_module,
        SYS_mount,
        SYS_umount2,
        SYS_pivot_root,
        SYS_swapon,
        SYS_swapoff,
        SYS_reboot,
        SYS_syslog,
        SYS_acct,
        SYS_quotactl,
        SYS_open_by_handle_at,
        SYS_name_to_handle_at,
        SYS_setns,
        SYS_userfaultfd,
        SYS_perf_event_open,
        SYS_fsopen,
        SYS_fsconfig,
        SYS_fsmount,
        SYS_fspick,
        SYS_move_mount,
        SYS_open_tree,
        SYS_mount_setattr,
        SYS_lookup_dcookie,
        SYS_settimeofday,
        SYS_clock_settime,
        SYS_clock_adjtime,
        SYS_adjtimex,
        SYS_vhangup,
        SYS_nfsservctl,
    ];
    #[cfg(target_arch = "x86_64")]
    all.extend([SYS_iopl, SYS_ioperm, SYS_uselib]);
    all
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn denied() -> Vec<libc::c_long> {
    Vec::new()
}

/// Namespace flags; `CLONE_NEWTIME` shares its bit with `clone`'s exit signal, so `unshare` only.
const CLONE_NEW: [libc::c_int; 7] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];

/// Personas `personality(2)` may set (Docker's list); `0xffffffff` only queries.
const PERSONAS: [u64; 5] = [0x0, 0x0008, 0x20000, 0x20008, 0xffff_ffff];

fn deny_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, ConfineError> {
    let condition = |op, value: u64| {
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, op, value)
            .map_err(ConfineError::BuildFilter)
    };
    // One rule per flag: the call is refused when any of them is set in arg0 (the flags, for
    // `clone` on x86_64 and aarch64 alike).
    let any_flag = |flags: &[libc::c_int]| -> Result<Vec<SeccompRule>, ConfineError> {
        flags
            .iter()
            .map(|&flag| {
                let flag = flag as u64;
                SeccompRule::new(vec![condition(SeccompCmpOp::MaskedEq(flag), flag)?])
                    .map_err(ConfineError::BuildFilter)
            })
            .collect()
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        denied().into_iter().map(|nr| (nr, Vec::new())).collect();
    rules.insert(libc::SYS_clone, any_flag(&CLONE_NEW)?);
    let mut unshare = CLONE_NEW.to_vec();
    unshare.push(libc::CLONE_NEWTIME);
    rules.insert(libc::SYS_unshare, any_flag(&unshare)?);
    // Refused unless arg0 is one of the allowed personas (all conditions of a rule must hold).
    let other_persona = PERSONAS
        .iter()
        .map(|&p| condition(SeccompCmpOp::Ne, p))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(
        libc::SYS_personality,
        vec![SeccompRule::new(other_persona).map_err(ConfineError::BuildFilter)?],
    );
    Ok(rules)
}

/// x86_64 only: refuses syscall numbers with the x32 bit set, which the number checks above would miss.
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> Option<BpfProgram> {
    use seccompiler::sock_filter;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E; // EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    Some(vec![
        op(LD_W_ABS, 0, 0, 4),              // A = seccomp_data.arch
        op(JEQ_K, 0, 3, AUDIT_ARCH_X86_64), // other ABIs: leave to the main filter
        op(LD_W_ABS, 0, 0, 0),              // A = seccomp_data.nr
        op(JGE_K, 0, 1, X32_SYSCALL_BIT),   // x32 syscall?
        op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ])
}

#[cfg(not(target_arch = "x86_64"))]
fn x32_guard() -> Option<BpfProgram> {
    None
}

#[cfg(test)]
mod tests {
    //! Every check runs in a child process (this test binary, re-executed to run one `#[ignore]`d
    //! helper), because the filter, the capability drop and `no_new_privs` cannot be undone.

    use super::*;
    use nix::sched::CloneFlags;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    const CHILD_ENV: &str = "SANDBOXD_CONFINE_CHILD";

    /// Runs `confine::tests::<helper>` in a fresh process; with `namespaces` (which must include a
    /// user namespace) as uid 0 of them, which is how `boot` calls us, and needs no host privilege.
    fn run_child(helper: &str, namespaces: Option<CloneFlags>) {
        let exe = std::env::current_exe().expect("test binary path");
        let mut cmd = Command::new(exe);
        cmd.args([
            &format!("confine::tests::{helper}"),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, helper);
        if let Some(namespaces) = namespaces {
            let uid_map = format!("0 {} 1", nix::unistd::getuid());
            let gid_map = format!("0 {} 1", nix::unistd::getgid());
            // SAFETY: the closure only makes syscalls on memory prepared before the fork.
            unsafe {
                cmd.pre_exec(move || {
                    nix::sched::unshare(namespaces)?;
                    write_proc(c"/proc/self/setgroups", b"deny")?;
                    write_proc(c"/proc/self/uid_map", uid_map.as_bytes())?;
                    write_proc(c"/proc/self/gid_map", gid_map.as_bytes())
                });
            }
        }
        let out = cmd.output().expect("run child test process");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child {helper} failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
    }

    /// open/write/close without allocating (runs between fork and exec).
    fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
        // SAFETY: valid C string and buffer; the fd is closed before returning.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let n = libc::write(fd, data.as_ptr().cast(), data.len());
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if n != data.len() as isize {
                return Err(err);
            }
        }
        Ok(())
    }

    /// True in the child process started for `helper`; helpers do nothing anywhere else.
    fn is_child(helper: &str) -> bool {
        std::env::var(CHILD_ENV).as_deref() == Ok(helper)
    }

    /// A field of this thread's `/proc` status (capabilities and no_new_privs are per thread).
    fn status(field: &str) -> String {
        let text = std::fs::read_to_string("/proc/thread-self/status").expect("read status");
        text.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .unwrap_or_else(|| panic!("no {field} in status"))
            .trim()
            .to_string()
    }

    fn cap_mask(field: &str) -> u64 {
        u64::from_str_radix(&status(field), 16).expect("hex capability mask")
    }

    /// The errno of a raw syscall's result, `None` on success.
    fn errno(ret: libc::c_long) -> Option<i32> {
        (ret == -1).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    /// Raw `clone(flags)` without a new stack, like fork; the child exits at once. `None` on success.
    fn clone_errno(flags: libc::c_int) -> Option<i32> {
        // SAFETY: fork-like clone; the child only calls _exit.
        let pid = unsafe { libc::syscall(libc::SYS_clone, flags | libc::SIGCHLD, 0, 0, 0, 0) };
        if pid == 0 {
            // SAFETY: leaving the forked child without running anything else.
            unsafe { libc::_exit(0) }
        }
        let err = errno(pid);
        if err.is_none() {
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None);
        }
        err
    }

    /// Escape syscalls with harmless arguments (each would fail with something other than EPERM
    /// if it got past the filter), by name.
    fn escape_probes() -> Vec<(&'static str, Option<i32>)> {
        let missing = c"/nonexistent-sandboxd-probe";
        // SAFETY: raw syscalls with null or valid pointers and nonexistent targets.
        unsafe {
            vec![
                ("keyctl", errno(libc::syscall(libc::SYS_keyctl, 0, -1, 0))),
                (
                    "add_key",
                    errno(libc::syscall(libc::SYS_add_key, 0, 0, 0, 0, 0)),
                ),
                ("bpf", errno(libc::syscall(libc::SYS_bpf, 9999, 0, 0))),
                (
                    "mount",
                    errno(libc::syscall(libc::SYS_mount, 0, missing.as_ptr(), 0, 0, 0)),
                ),
                (
                    "umount2",
                    errno(libc::syscall(libc::SYS_umount2, missing.as_ptr(), 0)),
                ),
                (
                    "pivot_root",
                    errno(libc::syscall(
                        libc::SYS_pivot_root,
                        missing.as_ptr(),
                        missing.as_ptr(),
                    )),
                ),
                (
                    "fsopen",
                    errno(libc::syscall(libc::SYS_fsopen, c"nofs".as_ptr(), 0)),
                ),
                ("setns", errno(libc::syscall(libc::SYS_setns, -1, 0))),
                (
                    "perf_event_open",
                    errno(libc::syscall(libc::SYS_perf_event_open, 0, 0, -1, -1, 0)),
                ),
                ("clone(CLONE_NEWUSER)", clone_errno(libc::CLONE_NEWUSER)),
                ("clone(CLONE_NEWNET)", clone_errno(libc::CLONE_NEWNET)),
                #[cfg(target_arch = "x86_64")]
                (
                    "x32 getpid",
                    errno(libc::syscall(0x4000_0000 | libc::SYS_getpid)),
                ),
            ]
        }
    }

    #[test]
    fn filters_compile_for_this_architecture() {
        let programs = filters().expect("build filters");
        assert!(programs.len() >= 2);
        assert!(programs.iter().all(|p| !p.is_empty() && p.len() < 4096));
    }

    #[test]
    fn seccomp_refuses_escape_syscalls_and_allows_ordinary_ones() {
        // Its own mount namespace too, so the mount probes get past the permission checks without
        // the filter (and show that EPERM is the filter's).
        run_child(
            "child_seccomp",
            Some(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS),
        );
    }

    #[test]
    #[ignore = "helper: runs only in the child process started by its test"]
    fn child_seccomp() {
        if !is_child("child_seccomp") {
            return;
        }
        // Without the filter none of the probes fails with EPERM, so EPERM below is the filter's.
        for (name, before) in escape_probes() {
            assert_ne!(
                before,
                Some(libc::EPERM),
                "{name} is refused even without the filter"
            );
        }
        // SAFETY: clone3 with a null argument only validates its size.
        let clone3 = || errno(unsafe { libc::syscall(libc::SYS_clone3, 0, 0) });
        assert_ne!(clone3(), Some(libc::ENOSYS));

        install_seccomp().expect("install seccomp");
        assert_eq!(status("Seccomp"), "2");
        for (name, after) in escape_probes() {
            assert_eq!(after, Some(libc::EPERM), "{name} got past the filter");
        }
        assert_eq!(
            clone3(),
            Some(libc::ENOSYS),
            "clone3 must look unimplemented"
        );
        // SAFETY: unshare/personality with integer arguments.
        unsafe {
            let newuser = libc::CLONE_NEWUSER as libc::c_long;
            assert_eq!(
                errno(libc::syscall(libc::SYS_unshare, newuser)),
                Some(libc::EPERM)
            );
            let newtime = libc::CLONE_NEWTIME as libc::c_long;
            assert_eq!(
                errno(libc::syscall(libc::SYS_unshare, newtime)),
                Some(libc::EPERM)
            );
            assert_eq!(
                errno(libc::syscall(libc::SYS_unshare, 0)),
                None,
                "plain unshare"
            );
            let no_aslr = 0x0040000; // ADDR_NO_RANDOMIZE
            assert_eq!(
                errno(libc::syscall(libc::SYS_personality, no_aslr)),
                Some(libc::EPERM)
            );
            assert_eq!(
                errno(libc::syscall(libc::SYS_personality, 0xffff_ffffu32)),
                None
            );
        }
        // Tracing is allowed: a probe of a pid that does not exist fails with ESRCH, not the filter's
        // EPERM (the sandbox test traces a real child).
        // SAFETY: ptrace on a nonexistent pid reads nothing.
        let traced =
            unsafe { libc::syscall(libc::SYS_ptrace, libc::PTRACE_PEEKDATA, i32::MAX, 0, 0) };
        assert_eq!(errno(traced), Some(libc::ESRCH), "ptrace is refused");
        // Ordinary life goes on: plain clone, fork+exec (libc falls back from clone3), threads.
        assert_eq!(clone_errno(0), None, "plain clone");
        assert_eq!(nix::unistd::getpid().as_raw() as u32, std::process::id());
        let ran = Command::new("true").status().expect("spawn true");
        assert!(ran.success());
        std::thread::spawn(|| ()).join().expect("thread");
    }

    #[test]
    fn capabilities_outside_keep_are_dropped_from_every_set() {
        run_child("child_capabilities", Some(CloneFlags::CLONE_NEWUSER));
    }

    #[test]
    #[ignore = "helper: runs only in the child process started by its test"]
    fn child_capabilities() {
        if !is_child("child_capabilities") {
            return;
        }
        let keep: u64 = KEEP.iter().map(|c| c.bitmask()).fold(0, |a, b| a | b);
        // uid 0 of a fresh user namespace starts with every capability.
        assert_ne!(
            cap_mask("CapBnd") & !keep,
            0,
            "nothing to drop: the test proves nothing"
        );
        assert_ne!(cap_mask("CapEff") & !keep, 0);
        drop_capabilities().expect("drop capabilities");
        assert_eq!(cap_mask("CapBnd"), keep);
        assert_eq!(cap_mask("CapEff"), keep);
        assert_eq!(cap_mask("CapPrm"), keep);
        assert_eq!(cap_mask("CapInh") & !keep, 0);
        assert_eq!(cap_mask("CapAmb"), 0);
        // Only ever narrows: a second call changes nothing and succeeds.
        drop_capabilities().expect("drop again");
        assert_eq!(cap_mask("CapBnd"), keep);
    }

    #[test]
    fn no_new_privs_is_set() {
        run_child("child_no_new_privs", None);
    }

    #[test]
    #[ignore = "helper: runs only in the child process started by its test"]
    fn child_no_new_privs() {
        if !is_child("child_no_new_privs") {
            return;
        }
        assert_eq!(status("NoNewPrivs"), "0");
        set_no_new_privs().expect("set no_new_privs");
        assert_eq!(status("NoNewPrivs"), "1");
    }
}
