//! Permission rules that last: a person's "allow" or "reject" kept for the session or, for
//! every session in a workspace, in `<data dir>/permissions.json`. The file lives with the
//! host, never in the workspace: a cloned repository cannot grant itself anything.
//!
//! A rule covers one kind of action narrowed to a command prefix, a path pattern or one MCP
//! tool ([`RuleTarget`]). The host proposes the rule for a call ([`propose`]) and the dialog
//! names it, so the person sees exactly what "always" covers. Matching is deliberately plain:
//! an allow rule covers a command only when [`plain_words`] can say with certainty which words
//! `sh` will run (no operators, quoting, expansions, control characters or non-ASCII text:
//! `cargo test && rm -rf ~` is not "`cargo test`", and `ls<VT>x/run.sh` is not `ls`), while a
//! reject rule looks loosely at every part of a command. Reject rules are a convenience, not
//! a sandbox: explore mode is the read-only guarantee.

use crate::host_api::wire::{Decision, PermissionRule, Review, RuleTarget};
use crate::jsonrpc::lock;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

/// A tool call as the rules see it.
pub struct Call<'a> {
    pub review: Review,
    /// The tool's name as the model sees it.
    pub tool: &'a str,
    /// `run_command`'s command line.
    pub command: Option<&'a str>,
    /// Paths the call touches, resolved, with their access (`read`, `write`).
    pub touches: &'a [(PathBuf, &'static str)],
    /// The session's working directory: file patterns are relative to it.
    pub cwd: &'a Path,
}

/// Characters that join or redirect commands in `sh`: a reject rule looks at every part of
/// a command split on them.
const SHELL_OPERATORS: &[char] = &[';', '&', '|', '`', '$', '<', '>', '(', ')', '\n', '\r'];

/// The words `sh` will see in `command`, when the matcher can be certain of them: words of
/// plain ASCII characters that no shell treats specially (letters, digits and `-_./:,+@%^=`),
/// separated by spaces or tabs — exactly where `sh` splits them. Anything else is `None`:
/// quotes and backslashes (quoting the matcher does not model), operators, substitutions,
/// redirections, globs and braces (they expand to words nobody has seen), `~`, `#`, control
/// characters (a vertical tab is not a separator to `sh`, so `ls<VT>x/run.sh` is one word, a
/// planted program's path), non-ASCII spaces and any non-ASCII text, and an environment
/// assignment before the program (`PATH=. ls`). Such a command is never covered by an allow
/// rule: it always asks.
pub fn plain_words(command: &str) -> Option<Vec<&str>> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:,+@%^=".contains(c);
    if !command.chars().all(|c| c == ' ' || c == '\t' || plain(c)) {
        return None;
    }
    let words: Vec<&str> = command
        .split([' ', '\t'])
        .filter(|w| !w.is_empty())
        .collect();
    match words.first() {
        Some(program) if !program.contains('=') => Some(words),
        _ => None,
    }
}

/// Programs whose plain arguments can make them run other code (`sed 1e…`, `find -exec`,
/// `tar --checkpoint-action=exec=…`, `rg --pre=…`, `git grep -O…`, `env`/`timeout`/`xargs`
/// wrapping any program, interpreters running any script): a prefix rule over them would
/// cover code nobody showed the person, so none is offered and none covers them — they ask
/// each time (or once, then bypass mode).
const RUNS_OTHER_CODE: &[&str] = &[
    "env", "timeout", "nice", "nohup", "xargs", "sudo", "doas", "su", "exec", "command", "builtin",
    "eval", "watch", "flock", "chroot", "setsid", "stdbuf", "strace", "ltrace", "gdb", "script",
    "ssh", "sh", "bash", "zsh", "dash", "ksh", "fish", "csh", "tcsh", "python", "python2",
    "python3", "node", "nodejs", "deno", "bun", "perl", "ruby", "php", "lua", "tclsh", "awk",
    "gawk", "mawk", "nawk", "sed", "gsed", "find", "tar", "gtar", "rg", "ripgrep", "less", "more",
    "vim", "vi", "nvim", "emacs", "man", "busybox", "rsync", "zip", "unzip", "7z", "parallel",
    "make", "npx", "pnpx", "bunx", "uvx", "pipx",
];

/// `git` subcommands that run other code from plain options (`-O`, `--output`,
/// `--ext-diff`, hooks of other repositories, aliases): covered by no prefix rule.
const GIT_RUNS_OTHER_CODE: &[&str] = &[
    "grep",
    "diff",
    "log",
    "show",
    "difftool",
    "mergetool",
    "format-patch",
    "archive",
    "config",
    "submodule",
    "filter-branch",
    "rebase",
    "bisect",
    "blame",
    "-c",
    "-C",
    "--exec-path",
    "--git-dir",
    "--work-tree",
    "--config-env",
    "clone",
    "fetch",
    "pull",
    "send-email",
    "am",
    "apply",
    "daemon",
    "instaweb",
    "notes",
    "worktree",
];

/// Whether a command's program (or `git` subcommand) can run other code from its arguments.
fn runs_other_code(words: &[&str]) -> bool {
    let program = words
        .first()
        .map_or("", |p| p.rsplit('/').next().unwrap_or(p));
    if RUNS_OTHER_CODE.contains(&program) || program.starts_with("python") {
        return true;
    }
    program == "git"
        && words
            .get(1)
            .is_some_and(|sub| GIT_RUNS_OTHER_CODE.contains(sub))
}

/// The words of each part of a command, split loosely (on operators, quotes, backslashes and
/// any whitespace or control character): what a reject rule looks for. Loose on purpose —
/// finding `rm` where `sh` might not costs a dialog, missing it would not be what the person
/// asked for.
fn loose_parts(command: &str) -> impl Iterator<Item = Vec<&str>> {
    command.split(SHELL_OPERATORS).map(|part| {
        part.split(|c: char| c.is_whitespace() || c.is_control() || "'\"\\".contains(c))
            .filter(|w| !w.is_empty())
            .collect()
    })
}

/// The rule the dialog offers for this call, or `None` when no rule would cover it (a plan
/// approval, a compound command, a file outside the working directory).
pub fn propose(call: &Call) -> Option<RuleTarget> {
    let target = match call.review {
        Review::Command => {
            let words = plain_words(call.command?)?;
            if runs_other_code(&words) {
                return None;
            }
            RuleTarget::Command {
                prefix: command_prefix(&words),
            }
        }
        Review::Edit | Review::Write => {
            let (first, _) = call.touches.iter().find(|(_, a)| *a == "write")?;
            let rel = relative(first, call.cwd)?;
            let path = match rel.parent().filter(|p| !p.as_os_str().is_empty()) {
                Some(dir) => format!("{}/**", dir.to_str()?),
                None => rel.to_str()?.to_string(),
            };
            RuleTarget::Files { path }
        }
        Review::Tool => RuleTarget::Tool {
            name: call.tool.into(),
        },
        Review::Plan => return None,
    };
    // What is offered must cover the call it is offered for.
    covers(&target, Decision::Allow, call).then_some(target)
}

/// The first rule deciding this call: rejections first, then allowances.
pub fn verdict<'r>(rules: &[&'r PermissionRule], call: &Call) -> Option<&'r PermissionRule> {
    let by = |d: Decision| {
        rules
            .iter()
            .copied()
            .find(|r| r.decision == d && covers(&r.target, d, call))
    };
    by(Decision::Deny).or_else(|| by(Decision::Allow))
}

fn covers(target: &RuleTarget, decision: Decision, call: &Call) -> bool {
    match (target, call.review) {
        (RuleTarget::Command { prefix }, Review::Command) => {
            let Some(command) = call.command else {
                return false;
            };
            match decision {
                // Both sides as `sh` splits them; a prefix that is not plain covers nothing.
                Decision::Allow => match (plain_words(prefix), plain_words(command)) {
                    (Some(prefix), Some(words)) => {
                        words.starts_with(&prefix) && !runs_other_code(&words)
                    }
                    _ => false,
                },
                Decision::Deny => {
                    let prefix: Vec<&str> = prefix.split_whitespace().collect();
                    !prefix.is_empty() && loose_parts(command).any(|w| w.starts_with(&prefix))
                }
            }
        }
        (RuleTarget::Files { path }, Review::Edit | Review::Write) => {
            let writes: Vec<&PathBuf> = call
                .touches
                .iter()
                .filter(|(_, a)| *a == "write")
                .map(|(p, _)| p)
                .collect();
            let inside = |p: &PathBuf| {
                relative(p, call.cwd).is_some_and(|rel| match path.strip_suffix("/**") {
                    Some(dir) => rel.starts_with(dir) && rel != Path::new(dir),
                    None => rel == Path::new(path),
                })
            };
            !writes.is_empty() && writes.into_iter().all(inside)
        }
        (RuleTarget::Tool { name }, Review::Tool) => name == call.tool,
        _ => false,
    }
}

/// `cargo test --all` → `cargo test`; `ls -la` → `ls`; `python3 x.py` → `python3`: the program,
/// and its subcommand when the second word looks like one.
fn command_prefix(words: &[&str]) -> String {
    match words {
        [program, w, ..]
            if !w.starts_with('-')
                && w.chars().any(|c| c.is_ascii_alphabetic())
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_:".contains(c)) =>
        {
            format!("{program} {w}")
        }
        [program, ..] => program.to_string(),
        [] => String::new(),
    }
}

/// `p` relative to `cwd`, when it is inside it and plain (no `..`, no root).
fn relative(p: &Path, cwd: &Path) -> Option<PathBuf> {
    let rel = p.strip_prefix(cwd).ok()?;
    let plain = rel.components().all(|c| matches!(c, Component::Normal(_)));
    (plain && !rel.as_os_str().is_empty()).then(|| rel.to_path_buf())
}

#[derive(Clone, Default, Serialize, Deserialize)]
struct Stored {
    /// Only version 1 is read: a file of another version (a newer host's) is refused and moved
    /// aside, never read as if it were this one.
    #[serde(deserialize_with = "version_one")]
    version: u32,
    /// Workspace (the session's working directory) → its rules, oldest first.
    #[serde(default)]
    workspaces: BTreeMap<String, Vec<PermissionRule>>,
}

fn version_one<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    match u32::deserialize(d)? {
        1 => Ok(1),
        v => Err(serde::de::Error::custom(format!(
            "version {v} is not one this host reads (1)"
        ))),
    }
}

/// The workspace rules (`permissions.json`).
pub struct Rules {
    dir: PathBuf,
    fsync: bool,
    /// What readers see; replaced after each durable write (never held across the write).
    state: Mutex<Stored>,
    /// Serializes writers; held across the write and its fsync.
    writer: Mutex<()>,
}

const FILE: &str = "permissions.json";

impl Rules {
    /// Reads `permissions.json`; a missing file is no rules; an unreadable one is logged and
    /// moved aside (the host still starts, and asks again).
    pub fn open(data_dir: &Path, fsync: bool) -> Rules {
        Rules {
            dir: data_dir.to_path_buf(),
            fsync,
            state: Mutex::new(crate::host::store::read_json_or_default(data_dir, FILE)),
            writer: Mutex::new(()),
        }
    }

    pub fn for_workspace(&self, workspace: &str) -> Vec<PermissionRule> {
        lock(&self.state)
            .workspaces
            .get(workspace)
            .cloned()
            .unwrap_or_default()
    }

    /// Keeps a rule for the workspace; one rule per target (the newest decision wins).
    pub fn add(&self, workspace: &str, rule: PermissionRule) -> std::io::Result<()> {
        self.change(|s| {
            let list = s.workspaces.entry(workspace.into()).or_default();
            list.retain(|r| r.target != rule.target);
            list.push(rule);
        })
        .map(|_| ())
    }

    /// Removes this rule from the workspace's (matched by value: the list the person saw may
    /// have changed since); whether it was there.
    pub fn remove(&self, workspace: &str, rule: &PermissionRule) -> std::io::Result<bool> {
        self.change(|s| {
            let Some(list) = s.workspaces.get_mut(workspace) else {
                return false;
            };
            let before = list.len();
            list.retain(|r| r != rule);
            let removed = list.len() < before;
            if list.is_empty() {
                s.workspaces.remove(workspace);
            }
            removed
        })
    }

    /// Applies `f` to a copy, writes it, and only then lets readers see it (as `Memory`
    /// does): a rule that could not be saved is not in force either.
    fn change<R>(&self, f: impl FnOnce(&mut Stored) -> R) -> std::io::Result<R> {
        let _writer = lock(&self.writer);
        let mut next = lock(&self.state).clone();
        let out = f(&mut next);
        next.version = 1;
        let bytes = serde_json::to_vec_pretty(&next).map_err(std::io::Error::other)?;
        crate::host::store::write_atomic(&self.dir, FILE, &bytes, self.fsync)?;
        *lock(&self.state) = next;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command<'a>(c: &'a str, cwd: &'a Path) -> Call<'a> {
        Call {
            review: Review::Command,
            tool: "run_command",
            command: Some(c),
            touches: &[],
            cwd,
        }
    }

    fn rule(decision: Decision, target: RuleTarget) -> PermissionRule {
        PermissionRule {
            decision,
            target,
            created_at: 0,
        }
    }

    #[test]
    fn commands_are_proposed_by_program_and_subcommand_and_matched_by_words() {
        let cwd = Path::new("/w");
        let prefix = |c: &str| match propose(&command(c, cwd)) {
            Some(RuleTarget::Command { prefix }) => Some(prefix),
            _ => None,
        };
        assert_eq!(prefix("cargo test --all").as_deref(), Some("cargo test"));
        assert_eq!(prefix("  ls -la ").as_deref(), Some("ls"));
        assert_eq!(
            prefix("python3 x.py"),
            None,
            "an interpreter runs any script"
        );
        assert_eq!(prefix("git status").as_deref(), Some("git status"));
        assert_eq!(prefix("cargo test && rm -rf ~"), None, "compound: no rule");
        assert_eq!(prefix("echo $(id)"), None);

        let allow = rule(
            Decision::Allow,
            RuleTarget::Command {
                prefix: "cargo test".into(),
            },
        );
        let rules = [&allow];
        let decided = |c: &str| verdict(&rules, &command(c, cwd)).is_some();
        assert!(decided("cargo test"));
        assert!(decided("cargo  test --release"));
        assert!(!decided("cargo testify"), "words, not characters");
        assert!(!decided("cargo test; rm -rf ~"));
        assert!(!decided("cargo test && rm -rf ~"));
        assert!(!decided("cargo build"));

        let deny = rule(
            Decision::Deny,
            RuleTarget::Command {
                prefix: "rm".into(),
            },
        );
        let rules = [&allow, &deny];
        let v = |c: &str| verdict(&rules, &command(c, cwd)).map(|r| r.decision);
        assert_eq!(v("rm -rf target"), Some(Decision::Deny));
        assert_eq!(
            v("cargo test && rm -rf ~"),
            Some(Decision::Deny),
            "any part"
        );
        assert_eq!(v("cargo test"), Some(Decision::Allow));
        assert_eq!(v("rmdir x"), None);
    }

    /// Commands an "always allow `ls`" rule must not cover: each would run something other
    /// than `ls` with plain arguments, or something the matcher cannot be sure of. One line a
    /// case; add more here.
    const NOT_COVERED_BY_LS: &[&str] = &[
        "ls\u{0b}x/run.sh",   // vertical tab: one word to sh, a planted program
        "ls\u{0c}x/run.sh",   // form feed
        "ls\u{a0}x/run.sh",   // no-break space
        "ls\u{85}x/run.sh",   // next line (NEL)
        "ls\u{2003}x/run.sh", // em space
        "ls\u{3000}x",        // ideographic space
        "ls\u{200b} -la",     // zero-width space glued to the program
        "ls -la\u{0}",        // NUL
        "ls\u{1b}[2J",        // an escape sequence
        "ls; ./run.sh",
        "ls && ./run.sh",
        "ls || ./run.sh",
        "ls | sh",
        "ls & ./run.sh",
        "ls\n./run.sh",
        "ls\r./run.sh",
        "ls $(./run.sh)",
        "ls `./run.sh`",
        "ls ${PATH}",
        "ls $HOME",
        "ls > /etc/passwd",
        "ls < x",
        "ls 2>x",
        "ls (x)",
        "ls 'a b'", // quoting the matcher does not model
        "ls \"x\"",
        "ls a\\ b",
        "l\\s",
        "ls *", // a glob: a planted `-exec`-style file name becomes an option
        "ls ?",
        "ls [a]",
        "ls {a,b}",
        "ls ~",
        "ls #x",
        "PATH=. ls", // an environment assignment before the program
        "LD_PRELOAD=x.so ls",
        "lsx/run.sh",
        "./ls",
        "x/ls",
        "",
        "   ",
    ];

    #[test]
    fn an_allow_rule_covers_only_commands_sh_splits_as_the_matcher_does() {
        let cwd = Path::new("/w");
        let allow = rule(
            Decision::Allow,
            RuleTarget::Command {
                prefix: "ls".into(),
            },
        );
        let rules = [&allow];
        for c in NOT_COVERED_BY_LS {
            assert!(
                verdict(&rules, &command(c, cwd)).is_none(),
                "{c:?} must ask, not run under `ls`"
            );
            assert!(
                !matches!(propose(&command(c, cwd)), Some(RuleTarget::Command { ref prefix }) if prefix == "ls"),
                "{c:?}: no lasting `ls` rule is offered for it"
            );
        }
        for c in [
            "ls",
            "ls -la",
            "ls\t-la src/",
            "ls  --color=auto a.txt",
            "ls -1 x,y",
        ] {
            assert!(verdict(&rules, &command(c, cwd)).is_some(), "{c:?} is `ls`");
        }
        // A stored prefix that is not plain (a hand-edited file) covers nothing.
        let odd = rule(
            Decision::Allow,
            RuleTarget::Command {
                prefix: "ls\u{0b}x".into(),
            },
        );
        assert!(verdict(&[&odd], &command("ls\u{0b}x", cwd)).is_none());
    }

    /// A kept prefix over a program that runs other code from plain arguments would cover
    /// that code: (the rule's prefix, a command it must not cover). None is offered for
    /// such programs either. One line a case.
    #[test]
    fn no_prefix_rule_covers_programs_that_run_other_code() {
        let cwd = Path::new("/w");
        for (prefix, line) in [
            ("sed", "sed -n 1eid f.txt"),
            ("git grep", "git grep -Otouch hello"),
            ("git diff", "git diff --output=/home/u/.bashrc"),
            (
                "tar",
                "tar tf a.tar --checkpoint=1 --checkpoint-action=exec=./x",
            ),
            ("rg", "rg PAT --pre=sh"),
            ("find", "find . -delete"),
            ("timeout", "timeout 10 ./x"),
            ("env", "env A=1 ./x"),
            ("python3", "python3 -m pytest"),
            ("xargs", "xargs rm"),
            ("make", "make --eval=x"),
            ("npx", "npx some-package"),
        ] {
            let allow = rule(
                Decision::Allow,
                RuleTarget::Command {
                    prefix: prefix.into(),
                },
            );
            assert!(
                verdict(&[&allow], &command(line, cwd)).is_none(),
                "{prefix:?} must not cover {line:?}"
            );
            assert!(
                propose(&command(line, cwd)).is_none(),
                "{line:?}: no rule offered"
            );
        }
        // Ordinary programs keep their rules.
        assert!(propose(&command("git status", cwd)).is_some());
        assert!(propose(&command("cargo test --all", cwd)).is_some());
    }

    #[test]
    fn a_reject_rule_finds_its_program_however_the_command_hides_it() {
        let cwd = Path::new("/w");
        let deny = rule(
            Decision::Deny,
            RuleTarget::Command {
                prefix: "rm".into(),
            },
        );
        let rules = [&deny];
        for c in [
            "rm -rf x",
            "ls;rm -rf x",
            "ls\u{a0}&& rm x",
            "echo \"$(rm x)\"",
            "'rm' x",
            "a | rm x",
        ] {
            assert_eq!(
                verdict(&rules, &command(c, cwd)).map(|r| r.decision),
                Some(Decision::Deny),
                "{c:?}"
            );
        }
    }

    #[test]
    fn file_rules_are_folders_or_files_inside_the_working_directory() {
        let cwd = Path::new("/w");
        let call = |touches: &'static [(PathBuf, &'static str)]| Call {
            review: Review::Edit,
            tool: "edit_file",
            command: None,
            touches,
            cwd,
        };
        let leak = |v: Vec<(PathBuf, &'static str)>| -> &'static [(PathBuf, &'static str)] {
            Box::leak(v.into_boxed_slice())
        };
        let in_src = leak(vec![(PathBuf::from("/w/src/a.rs"), "write")]);
        let at_root = leak(vec![(PathBuf::from("/w/README.md"), "write")]);
        let outside = leak(vec![(PathBuf::from("/etc/hosts"), "write")]);
        let deeper = leak(vec![(PathBuf::from("/w/src/x/b.rs"), "write")]);
        let sibling = leak(vec![(PathBuf::from("/w/srcs/b.rs"), "write")]);
        assert_eq!(
            propose(&call(in_src)),
            Some(RuleTarget::Files {
                path: "src/**".into()
            })
        );
        assert_eq!(
            propose(&call(at_root)),
            Some(RuleTarget::Files {
                path: "README.md".into()
            })
        );
        assert_eq!(propose(&call(outside)), None);

        let src = rule(
            Decision::Allow,
            RuleTarget::Files {
                path: "src/**".into(),
            },
        );
        let readme = rule(
            Decision::Allow,
            RuleTarget::Files {
                path: "README.md".into(),
            },
        );
        let rules = [&src, &readme];
        assert!(verdict(&rules, &call(deeper)).is_some(), "under the folder");
        assert!(
            verdict(&rules, &call(sibling)).is_none(),
            "a folder, not a prefix"
        );
        assert!(verdict(&rules, &call(at_root)).is_some());
        assert!(verdict(&rules, &call(outside)).is_none());
        let as_command = Call {
            review: Review::Command,
            ..call(in_src)
        };
        assert!(verdict(&rules, &as_command).is_none(), "kinds do not mix");
    }

    #[test]
    fn the_file_keeps_one_rule_per_target_and_survives_a_reopen() {
        let dir =
            std::env::temp_dir().join(format!("maka-perm-{}", crate::host_api::wire::now_ms()));
        std::fs::create_dir_all(&dir).unwrap();
        let rules = Rules::open(&dir, false);
        let target = RuleTarget::Tool { name: "t".into() };
        rules
            .add("/w", rule(Decision::Allow, target.clone()))
            .unwrap();
        rules
            .add("/w", rule(Decision::Deny, target.clone()))
            .unwrap();
        rules
            .add("/v", rule(Decision::Allow, target.clone()))
            .unwrap();
        let again = Rules::open(&dir, false);
        let w = again.for_workspace("/w");
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].decision, Decision::Deny, "the newest decision wins");
        let kept = w[0].clone();
        assert!(!again
            .remove("/w", &rule(Decision::Allow, target.clone()))
            .unwrap());
        assert!(again.remove("/w", &kept).unwrap());
        assert!(Rules::open(&dir, false).for_workspace("/w").is_empty());
        assert_eq!(Rules::open(&dir, false).for_workspace("/v").len(), 1);

        std::fs::write(dir.join(FILE), "{not json").unwrap();
        assert!(Rules::open(&dir, false).for_workspace("/v").is_empty());
        assert!(!dir.join(FILE).exists(), "moved aside");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
