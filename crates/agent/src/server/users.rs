//! Users and groups from `/etc/passwd` and `/etc/group`, parsed here rather than through NSS so the
//! agent links statically and sees exactly the sandbox's files. Read per request, so users added while
//! the sandbox runs are found. Malformed lines are skipped, never fatal.

use std::path::PathBuf;

/// A user the agent can run things as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    pub shell: String,
    /// Supplementary groups (from `/etc/group` member lists), primary group excluded.
    pub groups: Vec<u32>,
}

#[derive(Debug, Clone)]
struct Group {
    name: String,
    gid: u32,
    members: Vec<String>,
}

/// A parsed snapshot of the user and group databases.
#[derive(Debug, Clone, Default)]
pub struct UserDb {
    users: Vec<User>,
    groups: Vec<Group>,
}

impl UserDb {
    /// Reads `/etc/passwd` and `/etc/group` (a missing file counts as empty).
    pub fn load() -> UserDb {
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
        UserDb::parse(&passwd, &group)
    }

    pub fn parse(passwd: &str, group: &str) -> UserDb {
        let groups: Vec<Group> = entries(group)
            .filter_map(|f| {
                let [name, _pw, gid, members, ..] = f.as_slice() else {
                    // A group line may lack the members field entirely.
                    let [name, _pw, gid] = f.as_slice() else {
                        return None;
                    };
                    return Some(Group {
                        name: name.to_string(),
                        gid: gid.parse().ok()?,
                        members: vec![],
                    });
                };
                Some(Group {
                    name: name.to_string(),
                    gid: gid.parse().ok()?,
                    members: members
                        .split(',')
                        .filter(|m| !m.is_empty())
                        .map(str::to_owned)
                        .collect(),
                })
            })
            .collect();
        let users = entries(passwd)
            .filter_map(|f| {
                let [name, _pw, uid, gid, _gecos, home, shell] = f.as_slice() else {
                    return None;
                };
                let uid: u32 = uid.parse().ok()?;
                let gid: u32 = gid.parse().ok()?;
                let mut supplementary: Vec<u32> = groups
                    .iter()
                    .filter(|g| g.gid != gid && g.members.iter().any(|m| m == name))
                    .map(|g| g.gid)
                    .collect();
                supplementary.dedup();
                Some(User {
                    name: name.to_string(),
                    uid,
                    gid,
                    home: PathBuf::from(if home.is_empty() { "/" } else { home }),
                    shell: shell.to_string(),
                    groups: supplementary,
                })
            })
            .collect();
        UserDb { users, groups }
    }

    /// The user called `name` (first match, like NSS files).
    pub fn user(&self, name: &str) -> Option<User> {
        self.users.iter().find(|u| u.name == name).cloned()
    }

    /// The name of `uid`, or the number as a string.
    pub fn user_name(&self, uid: u32) -> String {
        self.users
            .iter()
            .find(|u| u.uid == uid)
            .map(|u| u.name.clone())
            .unwrap_or_else(|| uid.to_string())
    }

    /// The name of `gid`, or the number as a string.
    pub fn group_name(&self, gid: u32) -> String {
        self.groups
            .iter()
            .find(|g| g.gid == gid)
            .map(|g| g.name.clone())
            .unwrap_or_else(|| gid.to_string())
    }
}

/// The `:`-separated fields of each meaningful line (no blanks, comments or NIS `+`/`-` entries).
fn entries(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines()
        .map(str::trim_end)
        .filter(|l| {
            !l.is_empty() && !l.starts_with('#') && !l.starts_with('+') && !l.starts_with('-')
        })
        .map(|l| l.split(':').collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        # comment\n\
        \n\
        broken:x:notanumber:0::/:/bin/sh\n\
        short:x:5\n\
        user:x:1000:1000:User,,,:/home/user:/bin/bash\n\
        +nis\n\
        nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
    const GROUP: &str = "root:x:0:\nsudo:x:27:user,other\nuser:x:1000:user\ndocker:x:999:other,user\nnogroup:x:65534";

    #[test]
    fn parses_users_with_supplementary_groups() {
        let db = UserDb::parse(PASSWD, GROUP);
        let user = db.user("user").unwrap();
        assert_eq!((user.uid, user.gid), (1000, 1000));
        assert_eq!(user.home, PathBuf::from("/home/user"));
        assert_eq!(user.shell, "/bin/bash");
        assert_eq!(user.groups, vec![27, 999]);
        assert_eq!(db.user("root").unwrap().groups, Vec::<u32>::new());
        assert!(db.user("broken").is_none());
        assert!(db.user("short").is_none());
        assert!(db.user("+nis").is_none());
        assert!(db.user("ghost").is_none());
    }

    #[test]
    fn names_fall_back_to_numbers() {
        let db = UserDb::parse(PASSWD, GROUP);
        assert_eq!(db.user_name(65534), "nobody");
        assert_eq!(db.user_name(4242), "4242");
        assert_eq!(db.group_name(65534), "nogroup");
        assert_eq!(db.group_name(7), "7");
    }
}
