//! Running filesystem work with a user's filesystem credentials.
//!
//! [`run_as`] runs a closure on a fresh OS thread whose fsuid, fsgid and supplementary groups are the
//! user's. Those are per-thread on Linux (the raw `setgroups` syscall is used on purpose: glibc's wrapper
//! would change every thread), and the thread ends with the work, so no other thread ever holds the
//! user's credentials and the agent's own never change. With an fsuid other than 0 the kernel also drops
//! the thread's file capabilities, so permission checks and ownership of new entries are the user's.
//! Where the kernel has no filesystem ids (gVisor's), the thread's effective ids are switched instead,
//! to the same effect.

use super::super::error::ServerError;
use super::super::users::User;

/// Runs `work` with `user`'s filesystem identity; errors if the agent cannot take that identity.
pub async fn run_as<T, F>(user: &User, work: F) -> Result<T, ServerError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ServerError> + Send + 'static,
{
    let (uid, gid, name) = (user.uid, user.gid, user.name.clone());
    let groups = user.groups.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("agent-fs".into())
        .spawn(move || {
            let result = assume(uid, gid, &groups, &name).and_then(|()| work());
            let _ = tx.send(result);
        })
        .map_err(ServerError::io(
            "spawn a file operation thread for",
            &user.name,
        ))?;
    rx.await
        .map_err(|_| ServerError::Internal("the file operation thread died".into()))?
}

/// Switches the calling thread's filesystem identity to the user's.
fn assume(uid: u32, gid: u32, groups: &[u32], name: &str) -> Result<(), ServerError> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid == uid {
        return Ok(());
    }
    let denied = || {
        ServerError::PermissionDenied(format!(
            "the agent (uid {euid}) cannot act as user '{name}' (uid {uid})"
        ))
    };
    if euid != 0 {
        return Err(denied());
    }
    let mut all: Vec<libc::gid_t> = vec![gid];
    all.extend_from_slice(groups);
    // SAFETY: `all` is a valid array of `all.len()` gids for the duration of the call. The raw syscall
    // changes only this thread's groups; setfsgid/setfsuid are per-thread by definition.
    unsafe {
        if libc::syscall(libc::SYS_setgroups, all.len(), all.as_ptr()) != 0 {
            return Err(denied());
        }
        libc::setfsgid(gid);
        libc::setfsuid(uid);
        // Passing an invalid id changes nothing and returns the current value: verify the switch.
        if libc::setfsuid(u32::MAX) as u32 == uid && libc::setfsgid(u32::MAX) as u32 == gid {
            return Ok(());
        }
        // A kernel without filesystem ids (gVisor's): this thread's effective ids instead, with
        // the raw calls, which change only the calling thread (glibc's wrappers would change every
        // thread). The thread ends with the work, so nothing else ever runs with them.
        let keep = u32::MAX as libc::c_long;
        let switched = libc::syscall(libc::SYS_setresgid, keep, gid, keep) == 0
            && libc::syscall(libc::SYS_setresuid, keep, uid, keep) == 0
            && libc::syscall(libc::SYS_geteuid) as u32 == uid
            && libc::syscall(libc::SYS_getegid) as u32 == gid;
        if !switched {
            return Err(denied());
        }
    }
    Ok(())
}
