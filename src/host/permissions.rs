//! Permission rules that last: a person's "allow" or "reject" kept for the session or, for
//! every session in a workspace, in `<data dir>/permissions.json`. The file lives with the
//! host, never in the workspace: a cloned repository cannot grant itself anything.
//!
//! A rule covers one kind of action narrowed to a command, a path pattern or one MCP tool
//! ([`RuleTarget`]). The host proposes the rule for a call ([`propose`]) and the dialog names
//! it, so the person sees exactly what "always" covers.
//!
//! Commands have one reading ([`read_command`]), shared by the gate, the dialog, the rule
//! store and the executor: the words `sh` will run, when the matcher can be certain of them
//! (a subagent's argv is first written as the `sh` line that runs exactly it,
//! [`shell_line`]). An allow rule covers a command only through that reading, and a prefix
//! rule ("commands starting with `cargo test`") only for programs on an allow-list of
//! programs known not to run other code from their arguments, read with their own option
//! grammar ([`PREFIX_PROGRAMS`]); for any other program the lasting choice is the exact
//! command. A reject rule looks loosely at every part of a command. Reject rules are a
//! convenience, not a sandbox: explore mode is the read-only guarantee.
//!
//! No rule widens the session's folders: where an allow rule lets a command run unasked, what
//! it would read outside them ([`outside_reads`]: its words resolved as `read_file` resolves a
//! path, the links below the folders a recursive reader walks) gets the boundary dialog.

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
    /// The command as `sh` will run it: `run_command`'s line, or a subagent's argv written
    /// as its [`shell_line`].
    pub command: Option<&'a str>,
    /// Paths the call touches, resolved, with their access (`read`, `write`).
    pub touches: &'a [(PathBuf, &'static str)],
    /// The session's working directory: file patterns are relative to it.
    pub cwd: &'a Path,
}

/// Characters that join or redirect commands in `sh`: a reject rule looks at every part of
/// a command split on them.
const SHELL_OPERATORS: &[char] = &[';', '&', '|', '`', '$', '<', '>', '(', ')', '\n', '\r'];

/// A character no shell treats specially: letters, digits and `-_./:,+@%^=`.
fn plain_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_./:,+@%^=".contains(c)
}

/// The words `sh` will see in `command`, when the matcher can be certain of them: words of
/// plain ASCII characters that no shell treats specially ([`plain_char`]), separated by
/// spaces or tabs — exactly where `sh` splits them. Anything else is `None`: quotes and
/// backslashes (quoting the matcher does not model), operators, substitutions, redirections,
/// globs and braces (they expand to words nobody has seen), `~`, `#`, control characters (a
/// vertical tab is not a separator to `sh`, so `ls<VT>x/run.sh` is one word, a planted
/// program's path), non-ASCII spaces and any non-ASCII text, and an environment assignment
/// before the program (`PATH=. ls`). Such a command is never covered by an allow rule: it
/// always asks.
pub fn plain_words(command: &str) -> Option<Vec<&str>> {
    if !command
        .chars()
        .all(|c| c == ' ' || c == '\t' || plain_char(c))
    {
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

/// The `sh` line that runs exactly `argv` (program path and arguments as given): each word
/// as [`shell_word`] writes it. What a subagent's `terminal/create` is judged, shown and kept
/// as, so that `{"command": "ls x/run.sh"}` — the program at the path `ls x/run.sh` — reads
/// `'ls x/run.sh'`, which no rule for `ls` covers.
pub fn shell_line<S: AsRef<str>>(argv: &[S]) -> String {
    argv.iter()
        .enumerate()
        .map(|(i, w)| match w.as_ref() {
            // A program named `A=1` is not an assignment: `sh` must see one quoted word.
            w if i == 0 && w.contains('=') => single_quoted(w),
            w => shell_word(w),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `word` as one `sh` word: as it is when it is plain, else single-quoted (`'` as `'\''`).
pub fn shell_word(word: &str) -> String {
    if !word.is_empty() && word.chars().all(plain_char) {
        word.to_string()
    } else {
        single_quoted(word)
    }
}

/// `word` in single quotes, `'` as `'\''`: one `sh` word whatever it holds.
fn single_quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// A command as the allow rules read it.
#[derive(Debug, PartialEq)]
pub struct Reading<'a> {
    /// Every word, as `sh` splits them ([`plain_words`]).
    pub words: Vec<&'a str>,
    /// The program and, for programs read with subcommands, the subcommand (harmless global
    /// options left out): what a prefix rule names. `None` when no prefix rule may cover the
    /// command — its program is not on the allow-list, or it has options that run other code
    /// — and only an exact rule can.
    pub key: Option<Vec<&'a str>>,
}

/// The one reading of a command: `None` when the matcher cannot be certain of its words
/// (it always asks, and no lasting rule is offered).
pub fn read_command(command: &str) -> Option<Reading<'_>> {
    let words = plain_words(command)?;
    let key = prefix_key(&words);
    Some(Reading { words, key })
}

/// How a program on the allow-list is read.
enum Grammar {
    /// Its arguments are data (files, patterns, text), never a program, a script or an
    /// output file: the prefix is the program. An argument that is (or, for GNU programs,
    /// abbreviates) one of the `listed` options makes the command exact-only: with it the
    /// program reads paths named inside a file, not in its words (`wc --files0-from=F`,
    /// `md5sum -c F`, `file -f F`), or code that reads them (`jq -f F` with
    /// `import "x" as $x {search: "/elsewhere"}`, `jq -L dir`), which no check of its words
    /// can see ([`outside_reads`]).
    Arguments {
        listed: &'static [&'static str],
        abbreviates: bool,
    },
    /// `program [global options] subcommand [arguments]`: the prefix is the program and the
    /// subcommand. Only the listed global options (harmless ones) may come before the
    /// subcommand, only the listed subcommands are covered, and an argument that is (or, for
    /// programs that accept abbreviated long options, abbreviates) one of the `code` options
    /// makes the command exact-only.
    Subcommands {
        globals: &'static [&'static str],
        subcommands: &'static [&'static str],
        code: &'static [&'static str],
        abbreviates: bool,
    },
}

/// A program whose arguments are only data.
const DATA: Grammar = Grammar::Arguments {
    listed: &[],
    abbreviates: false,
};
/// A GNU program that reads the names of the files it reads from a file.
const FILES0_FROM: Grammar = Grammar::Arguments {
    listed: &["--files0-from"],
    abbreviates: true,
};
/// A GNU checksum program: `-c F` reads the files `F` lists.
const CHECKSUM: Grammar = Grammar::Arguments {
    listed: &["-c", "--check"],
    abbreviates: true,
};

/// The programs a prefix rule may name. An allow-list: a program that is not here gets an
/// exact rule at most, however harmless it is, because a deny-list of programs that run
/// other code (`taskset`, `ionice`, `chrt`, `unshare`, `prlimit`, `setpriv`, `perf`,
/// `run-parts`, `sqlite3 -init`, interpreters, wrappers…) always misses one. Programs that
/// write, move or delete where an argument says (`cp`, `mv`, `ln`, `tee`, `rm`, `mkdir`,
/// `touch`, `sort -o`, `uniq IN OUT`, `xxd -r`, `tree -o`) are not here either: they could
/// plant code (`.git/config`, `.cargo/config.toml`) or destroy work. And an argument that is
/// an absolute path, `~` or goes up (`..`) makes any command exact-only ([`leaves_the_workspace`]):
/// a prefix for reading the workspace does not cover reading `/proc/<pid>/environ`.
const PREFIX_PROGRAMS: &[(&str, Grammar)] = &[
    ("ls", DATA),
    ("cat", DATA),
    ("head", DATA),
    ("tail", DATA),
    ("wc", FILES0_FROM),
    ("pwd", DATA),
    ("echo", DATA),
    ("printf", DATA),
    ("grep", DATA),
    ("egrep", DATA),
    ("fgrep", DATA),
    ("diff", DATA),
    ("cmp", DATA),
    ("stat", DATA),
    (
        "file",
        Grammar::Arguments {
            listed: &["-f", "--files-from"],
            abbreviates: true,
        },
    ),
    ("du", FILES0_FROM),
    ("df", DATA),
    ("which", DATA),
    ("whoami", DATA),
    ("id", DATA),
    ("uname", DATA),
    ("basename", DATA),
    ("dirname", DATA),
    ("realpath", DATA),
    ("readlink", DATA),
    ("true", DATA),
    ("false", DATA),
    ("cut", DATA),
    ("tr", DATA),
    ("nl", DATA),
    ("od", DATA),
    ("hexdump", DATA),
    ("md5sum", CHECKSUM),
    ("sha1sum", CHECKSUM),
    ("sha256sum", CHECKSUM),
    ("sha512sum", CHECKSUM),
    ("b2sum", CHECKSUM),
    ("cksum", CHECKSUM),
    ("base64", DATA),
    (
        "jq",
        // jq reads its long options whole, and short ones anywhere in a word (`-nf`).
        Grammar::Arguments {
            listed: &["-f", "--from-file", "-L", "--library-path"],
            abbreviates: false,
        },
    ),
    ("column", DATA),
    ("comm", DATA),
    ("join", DATA),
    ("paste", DATA),
    ("fold", DATA),
    ("fmt", DATA),
    ("expand", DATA),
    ("rev", DATA),
    ("tac", DATA),
    ("seq", DATA),
    ("sleep", DATA),
    (
        "git",
        Grammar::Subcommands {
            // `-c`, `-C`, `--exec-path`, `--git-dir`, `--work-tree`, `--config-env`… run or
            // find other code: with them the command is exact-only.
            globals: &["--no-pager", "-P", "--no-optional-locks"],
            // Those that only read: a subcommand that writes the worktree or `.git` (`add`,
            // `mv`, `checkout`, `restore`, `reset`, `stash`) or runs hooks (`commit`,
            // `switch`) can move a planted file into `.git/config` or `.git/hooks`, so it is
            // exact-only.
            subcommands: &[
                "status",
                "log",
                "show",
                "diff",
                "rev-parse",
                "ls-files",
                "ls-tree",
                "cat-file",
                "describe",
                "shortlog",
                "merge-base",
                "blame",
                "version",
            ],
            // A file written where the option says, an external diff program, an exec
            // step, a program run on the other side, a pager opened on files.
            code: &[
                "--output",
                "--ext-diff",
                "--exec",
                "--upload-pack",
                "--receive-pack",
                "--open-files-in-pager",
                "--template",
            ],
            // git's option parser takes any unambiguous abbreviation (`--outp=x`).
            abbreviates: true,
        },
    ),
    (
        "cargo",
        Grammar::Subcommands {
            globals: &[
                "-q",
                "--quiet",
                "-v",
                "--verbose",
                "--locked",
                "--offline",
                "--frozen",
            ],
            subcommands: &[
                "build", "check", "test", "clippy", "fmt", "doc", "bench", "run", "tree",
                "metadata", "version",
            ],
            // Configuration from the command line (a `rustc-wrapper`, a runner), another
            // project's manifest (its build scripts), and output where an option says (a
            // deleted or written folder, `rustfmt --print-config default PATH`).
            code: &[
                "--config",
                "-Z",
                "--manifest-path",
                "-C",
                "--target-dir",
                "--artifact-dir",
                "--out-dir",
                "--print-config",
            ],
            abbreviates: false,
        },
    ),
];

/// The words a prefix rule names for this command, or `None` (see [`Reading::key`]).
fn prefix_key<'a>(words: &[&'a str]) -> Option<Vec<&'a str>> {
    let (&program, rest) = words.split_first()?;
    let (_, grammar) = PREFIX_PROGRAMS.iter().find(|(p, _)| *p == program)?;
    if rest.iter().any(|w| leaves_the_workspace(w)) {
        return None;
    }
    match grammar {
        Grammar::Arguments {
            listed,
            abbreviates,
        } => {
            let reads_a_list = rest
                .iter()
                .any(|w| listed.iter().any(|o| names_option(w, o, *abbreviates)));
            (!reads_a_list).then(|| vec![program])
        }
        Grammar::Subcommands {
            globals,
            subcommands,
            code,
            abbreviates,
        } => {
            let at = rest.iter().position(|w| !globals.contains(w))?;
            let sub = rest[at];
            if !subcommands.contains(&sub) {
                return None;
            }
            let runs_code = rest[at + 1..]
                .iter()
                .any(|w| code.iter().any(|o| names_option(w, o, *abbreviates)));
            (!runs_code).then(|| vec![program, sub])
        }
    }
}

/// Whether the argument `word` is the option `option` (`--output`, `--output=x`), with
/// `abbreviates` an abbreviation of it (`--outp=x`); a short one (`-Z`) anywhere in a cluster
/// of short options (`-Zx`, `-qZx`: clap and getopt read `-q -Z x`).
fn names_option(word: &str, option: &str, abbreviates: bool) -> bool {
    if let Some(long) = option.strip_prefix("--") {
        let Some(name) = word.strip_prefix("--") else {
            return false;
        };
        let name = name.split('=').next().unwrap_or(name);
        name == long || (abbreviates && !name.is_empty() && long.starts_with(name))
    } else {
        let short = option.trim_start_matches('-');
        !word.starts_with("--")
            && word
                .strip_prefix('-')
                .is_some_and(|cluster| cluster.contains(short))
    }
}

/// An argument that names a place outside the working directory: an absolute path, a home
/// path, or one that goes up (`..`), also as an option's value (`--include=/proc/x`).
fn leaves_the_workspace(word: &str) -> bool {
    let value = word.split_once('=').map_or(word, |(_, v)| v);
    [word, value]
        .iter()
        .any(|w| w.starts_with('/') || w.starts_with('~') || w.split('/').any(|part| part == ".."))
}

/// What a command reads, as the boundary sees it ([`outside_reads`]).
#[derive(Debug, PartialEq)]
pub enum Reads {
    /// The paths it may read that lie outside the session's folders, resolved (none: it
    /// reads only inside them).
    Outside(Vec<PathBuf>),
    /// It could not be checked within the bounds (a folder too large to walk, too many
    /// words or links): why, for the log. No kept rule decides it; the person is asked.
    Unchecked(String),
}

/// Most entries a recursive read's folders are walked for links before it asks instead.
const READ_WALK_LIMIT: usize = 20_000;
/// Most path candidates of one command's words.
const READ_CANDIDATE_LIMIT: usize = 2_000;
/// Most outside paths one boundary dialog names; past it the command asks as a whole.
const READ_OUTSIDE_LIMIT: usize = 16;

/// How a program that reads folders recursively is read: what turns recursion on, and how
/// its operands are told apart (with no folder operand it reads the working directory).
struct Recursion {
    program: &'static str,
    /// Recursive whatever its options say (`du`, `find`, `diff` given folders).
    always: bool,
    /// Short options that make it recursive, anywhere in a cluster (`-rn`).
    short: &'static str,
    /// Long options that make it recursive (or an abbreviation of one: `--rec`).
    long: &'static [&'static str],
    operands: Operands,
}

/// How a recursive reader's operands are found, to know whether it reads the working
/// directory. Each errs on the safe side: a word that may be an option's value is no operand,
/// so the working directory is walked.
enum Operands {
    /// GNU options: `short_values` take a value (the rest of the cluster, or the next word);
    /// `long_flags` take none (any other long option given without `=` may take the next
    /// word); with `pattern_first`, the first operand is a pattern unless `-e`/`-f`
    /// (`--regexp`/`--file`) gave one.
    Gnu {
        short_values: &'static str,
        long_flags: &'static [&'static str],
        pattern_first: bool,
    },
    /// Folders before the expression (`find [-H|-L|-P] folder… -name x`).
    BeforeExpression,
    /// Only what it names (`diff -r a b` needs both).
    NamedOnly,
    /// No grammar kept here (`rg`, `tree`): it counts as reading the working directory.
    Unknown,
}

const GREP_FLAGS: &[&str] = &[
    "recursive",
    "dereference-recursive",
    "line-number",
    "ignore-case",
    "no-ignore-case",
    "count",
    "files-with-matches",
    "files-without-match",
    "invert-match",
    "word-regexp",
    "line-regexp",
    "with-filename",
    "no-filename",
    "only-matching",
    "quiet",
    "silent",
    "no-messages",
    "byte-offset",
    "text",
    "null",
    "null-data",
    "fixed-strings",
    "extended-regexp",
    "basic-regexp",
    "perl-regexp",
    "initial-tab",
    "line-buffered",
];

const fn grep(program: &'static str) -> Recursion {
    Recursion {
        program,
        always: false,
        short: "rR",
        long: &["recursive", "dereference-recursive"],
        operands: Operands::Gnu {
            short_values: "ABCDdefm",
            long_flags: GREP_FLAGS,
            pattern_first: true,
        },
    }
}

/// The programs that read folders recursively. `find`, `rg` and `tree` are on no prefix
/// allow-list, but an exact rule may name them.
const RECURSIVE_READERS: &[Recursion] = &[
    grep("grep"),
    grep("egrep"),
    grep("fgrep"),
    Recursion {
        program: "ls",
        always: false,
        short: "R",
        long: &["recursive"],
        operands: Operands::Gnu {
            short_values: "ITw",
            long_flags: &[
                "recursive",
                "all",
                "almost-all",
                "human-readable",
                "classify",
                "directory",
                "reverse",
                "size",
                "dereference",
                "numeric-uid-gid",
                "inode",
            ],
            pattern_first: false,
        },
    },
    // Given folders, `diff` reads same-named files in them with or without `-r`
    // (`diff a b` compares `a/x` with `b/x`, `diff f dir` reads `dir/f`), following links:
    // the folders it names are always walked.
    Recursion {
        program: "diff",
        always: true,
        short: "r",
        long: &["recursive"],
        operands: Operands::NamedOnly,
    },
    Recursion {
        program: "du",
        always: true,
        short: "",
        long: &[],
        operands: Operands::Gnu {
            short_values: "BdtX",
            long_flags: &[
                "all",
                "summarize",
                "human-readable",
                "si",
                "bytes",
                "dereference",
                "dereference-args",
                "no-dereference",
                "count-links",
                "apparent-size",
                "total",
                "one-file-system",
                "separate-dirs",
                "null",
                "inodes",
            ],
            pattern_first: false,
        },
    },
    Recursion {
        program: "find",
        always: true,
        short: "",
        long: &[],
        operands: Operands::BeforeExpression,
    },
    Recursion {
        program: "rg",
        always: true,
        short: "",
        long: &[],
        operands: Operands::Unknown,
    },
    Recursion {
        program: "tree",
        always: true,
        short: "",
        long: &[],
        operands: Operands::Unknown,
    },
];

impl Recursion {
    /// Whether these arguments make it recurse. Loose on purpose: an option letter found
    /// where it is really a value (`-er`) costs a walk, never a missed one.
    fn recurses(&self, args: &[&str]) -> bool {
        let option = |w: &&str| match w.strip_prefix("--") {
            Some(long) => {
                let name = long.split('=').next().unwrap_or(long);
                (!name.is_empty() && self.long.iter().any(|l| l.starts_with(name)))
                    || long.ends_with("=recurse")
            }
            None => w.starts_with('-') && w[1..].chars().any(|c| self.short.contains(c)),
        };
        // grep's `-d recurse` (`-drecurse`, `--directories recurse`).
        let recurse_value = |w: &&str| !self.short.is_empty() && w.ends_with("recurse");
        self.always || args.iter().any(|w| option(w) || recurse_value(w))
    }

    /// Whether it names no folder of its own, and so reads the working directory.
    fn reads_cwd(&self, args: &[&str]) -> bool {
        let (short_values, long_flags, pattern_first) = match self.operands {
            Operands::Gnu {
                short_values,
                long_flags,
                pattern_first,
            } => (short_values, long_flags, pattern_first),
            Operands::BeforeExpression => {
                return args
                    .first()
                    .is_none_or(|w| w.starts_with('-') || w.starts_with('(') || w.starts_with('!'))
            }
            Operands::NamedOnly => return false,
            Operands::Unknown => return true,
        };
        let mut operands = 0usize;
        let mut pattern_given = false;
        let mut options_ended = false;
        let mut i = 0;
        while i < args.len() {
            let word = args[i];
            i += 1;
            if options_ended || word == "-" || !word.starts_with('-') {
                operands += 1;
            } else if word == "--" {
                options_ended = true;
            } else if let Some(long) = word.strip_prefix("--") {
                let (name, valued) = long
                    .split_once('=')
                    .map_or((long, false), |(n, _)| (n, true));
                if pattern_first
                    && !name.is_empty()
                    && ["regexp", "file"].iter().any(|o| o.starts_with(name))
                {
                    pattern_given = true;
                }
                if !valued && !long_flags.contains(&name) {
                    i += 1;
                }
            } else {
                let cluster = &word[1..];
                if let Some((at, c)) = cluster
                    .char_indices()
                    .find(|(_, c)| short_values.contains(*c))
                {
                    pattern_given |= pattern_first && "ef".contains(c);
                    if at + c.len_utf8() == cluster.len() {
                        i += 1;
                    }
                }
            }
        }
        if pattern_first && !pattern_given {
            operands = operands.saturating_sub(1);
        }
        operands == 0
    }
}

/// The paths a word may name: itself; an option's value (`--file=x`); and for a cluster of
/// short options, what follows each letter (`-fnotes.txt`, `-f/etc/passwd`: the value may
/// start anywhere). A value made only of `/` is a separator (`cut -d/`), not the root.
fn path_candidates(word: &str) -> Vec<&str> {
    let mut out = vec![word];
    if let Some((_, value)) = word.split_once('=') {
        out.push(value);
    }
    if word.starts_with('-') && !word.starts_with("--") {
        // Plain words are ASCII: every index is a boundary.
        out.extend((2..word.len()).map(|i| &word[i..]));
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|c| {
        !c.is_empty() && (c == &word || !c.chars().all(|ch| ch == '/')) && seen.insert(*c)
    });
    out
}

/// What `command` would read outside `roots` (the session's folders), for a kept rule that
/// allows it: every word that may be a path, resolved exactly as `read_file` resolves its
/// path ([`crate::host::tools::fs::resolve`], every link followed), and for a program that
/// reads folders recursively (`grep -r`, `ls -R`, `du`, `find`…), every link below the
/// folders it reads (the named ones, or the working directory), walked within
/// [`READ_WALK_LIMIT`] entries. A kept rule never widens the session's folders: what is
/// outside gets the boundary dialog, as `read_file`'s path does; what cannot be checked is
/// asked as a whole. A command the matcher cannot read (no plain words) reads nothing here:
/// no allow rule covers it.
pub fn outside_reads(command: &str, cwd: &Path, roots: &[PathBuf]) -> Reads {
    use crate::host::tools::fs::resolve;
    let Some(words) = plain_words(command) else {
        return Reads::Outside(vec![]);
    };
    let (&program, args) = match words.split_first() {
        Some(split) => split,
        None => return Reads::Outside(vec![]),
    };
    let inside = |p: &Path| roots.iter().any(|r| p.starts_with(r));
    let recursion = RECURSIVE_READERS
        .iter()
        .find(|r| r.program == program)
        .filter(|r| r.recurses(args));
    let mut outside = std::collections::BTreeSet::new();
    let mut folders = vec![];
    let mut candidates = 0;
    for word in args {
        for c in path_candidates(word) {
            candidates += 1;
            if candidates > READ_CANDIDATE_LIMIT {
                return Reads::Unchecked(format!(
                    "its words name more than {READ_CANDIDATE_LIMIT} possible paths"
                ));
            }
            let real = resolve(cwd, c);
            if !inside(&real) {
                outside.insert(real);
            } else if recursion.is_some() && real.is_dir() {
                folders.push(real);
            }
        }
    }
    if let Some(r) = recursion {
        if r.reads_cwd(args) {
            folders.push(cwd.to_path_buf());
        }
        if let Err(why) = links_leading_outside(folders, &inside, &mut outside) {
            return Reads::Unchecked(why);
        }
    }
    if outside.len() > READ_OUTSIDE_LIMIT {
        return Reads::Unchecked(format!(
            "it reads more than {READ_OUTSIDE_LIMIT} paths outside the session's folders"
        ));
    }
    Reads::Outside(outside.into_iter().collect())
}

/// Walks `folders` (resolved, inside the roots) for links: each link that leads outside is
/// added to `outside` (where it leads); one that leads to a folder inside is walked too (a
/// reader that follows links goes there). `Err` past [`READ_WALK_LIMIT`] entries or
/// [`READ_OUTSIDE_LIMIT`] outside paths.
fn links_leading_outside(
    folders: Vec<PathBuf>,
    inside: &dyn Fn(&Path) -> bool,
    outside: &mut std::collections::BTreeSet<PathBuf>,
) -> Result<(), String> {
    use crate::host::tools::fs::resolve;
    let mut seen = std::collections::HashSet::new();
    let mut stack = folders;
    let mut entries = 0usize;
    while let Some(dir) = stack.pop() {
        if !seen.insert(dir.clone()) {
            continue;
        }
        // A folder nobody can list: the program cannot read it either.
        let Ok(list) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in list.flatten() {
            entries += 1;
            if entries > READ_WALK_LIMIT {
                return Err(format!(
                    "its folders hold more than {READ_WALK_LIMIT} entries to check for links"
                ));
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_symlink() {
                let real = resolve(Path::new("/"), entry.path());
                if !inside(&real) {
                    outside.insert(real);
                    if outside.len() > READ_OUTSIDE_LIMIT {
                        return Err(format!(
                            "it reads more than {READ_OUTSIDE_LIMIT} paths outside the session's folders"
                        ));
                    }
                } else if real.is_dir() {
                    stack.push(real);
                }
            } else if kind.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Ok(())
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
/// approval, a command the matcher cannot read, a file outside the working directory).
pub fn propose(call: &Call) -> Option<RuleTarget> {
    let target = match call.review {
        Review::Command => {
            let reading = read_command(call.command?)?;
            match reading.key {
                Some(key) => RuleTarget::Command {
                    prefix: key.join(" "),
                    exact: false,
                },
                None => RuleTarget::Command {
                    prefix: reading.words.join(" "),
                    exact: true,
                },
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
        (RuleTarget::Command { prefix, exact }, Review::Command) => {
            let Some(command) = call.command else {
                return false;
            };
            match decision {
                // Both sides read as `sh` splits them; a rule that is not plain covers nothing.
                // The exact command is always what its rule names; a prefix covers more only
                // through the command's key (an allow-listed program, read with its grammar).
                Decision::Allow => match (plain_words(prefix), read_command(command)) {
                    (Some(rule), Some(reading)) => {
                        reading.words == rule
                            || (!exact && reading.key.is_some_and(|key| key.starts_with(&rule)))
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

/// The key a workspace's kept rules (and its agents' trust) are kept under: the folder for the
/// machine's user (as before principals), `@NAME:folder` for a principal's sessions — names
/// hold no `:` and folders are absolute, so no key is both.
pub fn owned_key(owner: Option<&str>, workspace: &str) -> String {
    match owner {
        None => workspace.to_string(),
        Some(name) => format!("@{name}:{workspace}"),
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
            Some(RuleTarget::Command {
                prefix,
                exact: false,
            }) => Some(prefix),
            _ => None,
        };
        assert_eq!(prefix("cargo test --all").as_deref(), Some("cargo test"));
        assert_eq!(prefix("  ls -la ").as_deref(), Some("ls"));
        assert_eq!(
            prefix("python3 x.py"),
            None,
            "an interpreter runs any script"
        );
        assert_eq!(
            propose(&command("python3  x.py", cwd)),
            Some(RuleTarget::Command {
                prefix: "python3 x.py".into(),
                exact: true
            }),
            "the lasting choice for it is the exact command"
        );
        assert_eq!(
            prefix("ls src").as_deref(),
            Some("ls"),
            "arguments are data"
        );
        assert_eq!(prefix("git status").as_deref(), Some("git status"));
        assert_eq!(prefix("cargo test && rm -rf ~"), None, "compound: no rule");
        assert_eq!(prefix("echo $(id)"), None);

        let allow = rule(
            Decision::Allow,
            RuleTarget::Command {
                prefix: "cargo test".into(),
                exact: false,
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
                exact: false,
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
                exact: false,
            },
        );
        let rules = [&allow];
        for c in NOT_COVERED_BY_LS {
            assert!(
                verdict(&rules, &command(c, cwd)).is_none(),
                "{c:?} must ask, not run under `ls`"
            );
            assert!(
                !matches!(propose(&command(c, cwd)), Some(RuleTarget::Command { ref prefix, .. }) if prefix == "ls"),
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
                exact: false,
            },
        );
        assert!(verdict(&[&odd], &command("ls\u{0b}x", cwd)).is_none());
    }

    /// A kept prefix must never cover code nobody showed the person: (the rule's prefix, a
    /// command it must not cover). Such a command is offered its exact self at most, never a
    /// prefix. One line a case; a new wrapper or code-running option is one more row.
    const NOT_COVERED_BY_A_PREFIX: &[(&str, &str)] = &[
        // Programs that run other code from plain arguments.
        ("sed", "sed -n 1eid f.txt"),
        ("git grep", "git grep -Otouch hello"),
        (
            "tar",
            "tar tf a.tar --checkpoint=1 --checkpoint-action=exec=./x",
        ),
        ("rg", "rg PAT --pre=sh"),
        ("find", "find . -delete"),
        ("python3", "python3 -m pytest"),
        ("make", "make --eval=x"),
        ("npx", "npx some-package"),
        ("npm test", "npm test --script-shell=./x.sh"),
        ("sqlite3", "sqlite3 -init ./x.sql db"),
        ("perf", "perf record ./x.sh"),
        ("run-parts", "run-parts ./hooks"),
        // Wrappers that run the program they are given: a deny-list missed each of these.
        ("timeout", "timeout 10 ./x"),
        ("env", "env A=1 ./x"),
        ("xargs", "xargs rm"),
        ("taskset", "taskset 1 ./x.sh"),
        ("ionice", "ionice -c3 ./x.sh"),
        ("chrt", "chrt 0 ./x.sh"),
        ("unshare", "unshare ./x.sh"),
        ("prlimit", "prlimit --nofile=10 ./x.sh"),
        ("setpriv", "setpriv ./x.sh"),
        ("nice", "nice ./x.sh"),
        // Programs that write where an argument says (a planted script, an rc file).
        ("cp", "cp x.sh /home/u/.bashrc"),
        ("tee", "tee /home/u/.profile"),
        ("sort", "sort -o /home/u/.bashrc x"),
        // git read with its option grammar: code-running global options wherever they are.
        ("git", "git --exec-path=./gx status"),
        ("git", "git --no-pager -c core.fsmonitor=./x.sh status"),
        ("git", "git -c core.pager=./x.sh log"),
        ("git", "git -C ../elsewhere status"),
        ("git", "git --git-dir=./planted status"),
        ("git", "git --version --exec-path=./gx"),
        (
            "git status",
            "git --no-pager -c core.fsmonitor=./x.sh status",
        ),
        ("git log", "git --no-pager --exec-path=./gx log"),
        ("git diff", "git diff --output=/home/u/.bashrc"),
        ("git diff", "git diff --outp=out.txt"),
        ("git diff", "git diff --ext-diff"),
        ("git log", "git log -p --ext"),
        ("git", "git submodule foreach ./x.sh"),
        ("git", "git daemon"),
        // cargo: configuration and another project's manifest from the command line.
        (
            "cargo test",
            "cargo test --config=build.rustc-wrapper=./x.sh",
        ),
        ("cargo build", "cargo build -Zunstable-options"),
        (
            "cargo build",
            "cargo build --manifest-path=/tmp/planted/Cargo.toml",
        ),
        ("cargo", "cargo +nightly test"),
        // Subcommands that write `.git` or the worktree, or run hooks (review of 494ff50).
        ("git", "git mv -f src/notes.txt .git/config"),
        ("git", "git add src/notes.txt"),
        ("git", "git commit --allow-empty -m y"),
        ("git", "git checkout main"),
        ("git", "git reset --hard"),
        ("git", "git stash clear"),
        // Clustered short options and output folders.
        ("cargo build", "cargo build -qZunstable-options"),
        ("cargo clean", "cargo clean --target-dir=elsewhere"),
        ("cargo", "cargo clean"),
        ("cargo fmt", "cargo fmt -- --print-config default rc"),
        ("cargo build", "cargo build --target-dir=out"),
        // Leaving the workspace: an absolute path, home, `..`, also as an option's value.
        ("grep", "grep -r -a -z -e MAKA_HOST_TOKEN /proc"),
        ("grep", "grep -r --include=/proc/1/environ x ."),
        ("cat", "cat /home/u/.ssh/id_rsa"),
        ("cat", "cat ../other/secret.txt"),
        ("ls", "ls src/../../x"),
        ("git diff", "git diff --no-index /etc/passwd x"),
        // Programs that write, move or delete where an argument says.
        ("rm", "rm -rf .git"),
        ("mkdir", "mkdir .cargo"),
        ("touch", "touch .envrc"),
        // Programs named by a path are not the allow-listed program.
        ("ls", "./ls"),
        ("ls", "/tmp/ls -la"),
        // Readers that take the paths they read (or code that reads them) from a file.
        ("jq", "jq -f f.jq x.json"),
        ("jq", "jq -nf f.jq"),
        ("jq", "jq --from-file f.jq x.json"),
        ("jq", "jq -L lib . x.json"),
        ("jq", "jq --library-path=lib . x.json"),
        ("wc", "wc --files0-from=list"),
        ("wc", "wc -l --files0=list"),
        ("du", "du -s --files0-from list"),
        ("md5sum", "md5sum -c sums"),
        ("sha256sum", "sha256sum --check sums"),
        ("sha1sum", "sha1sum --quiet -c sums"),
        ("sha512sum", "sha512sum --ch sums"),
        ("b2sum", "b2sum -c sums"),
        ("cksum", "cksum --check sums"),
        ("file", "file -f list"),
        ("file", "file --files-from=list"),
    ];

    #[test]
    fn no_prefix_rule_covers_programs_that_run_other_code() {
        let cwd = Path::new("/w");
        for (prefix, line) in NOT_COVERED_BY_A_PREFIX {
            let allow = rule(
                Decision::Allow,
                RuleTarget::Command {
                    prefix: prefix.to_string(),
                    exact: false,
                },
            );
            assert!(
                verdict(&[&allow], &command(line, cwd)).is_none(),
                "{prefix:?} must not cover {line:?}"
            );
            assert_eq!(
                propose(&command(line, cwd)),
                Some(RuleTarget::Command {
                    prefix: line.to_string(),
                    exact: true
                }),
                "{line:?}: only the exact command is offered"
            );
        }
        // The exact rule covers that command and nothing longer or different.
        let exact = rule(
            Decision::Allow,
            RuleTarget::Command {
                prefix: "python3 -m pytest".into(),
                exact: true,
            },
        );
        let covered = |c: &str| verdict(&[&exact], &command(c, cwd)).is_some();
        assert!(covered("python3 -m pytest") && covered("python3  -m\tpytest"));
        assert!(!covered("python3 -m pytest -p x"));
        assert!(!covered("python3 -m pytes"));
        // Ordinary programs keep their prefix rules, read with their grammar.
        for (line, offered) in [
            ("git status", "git status"),
            ("git --no-pager log --oneline -5", "git log"),
            ("git diff --stat", "git diff"),
            ("git log --no-ext-diff", "git log"),
            ("cargo test --all", "cargo test"),
            ("cargo -q build --release", "cargo build"),
            ("cargo fmt -- --config-path x", "cargo fmt"),
            ("ls -la src", "ls"),
            ("grep -rn foo src", "grep"),
            ("jq -r .name x.json", "jq"),
            ("wc -l src/a.rs", "wc"),
            ("sha256sum x.tar", "sha256sum"),
            ("file -b x", "file"),
        ] {
            assert_eq!(
                propose(&command(line, cwd)),
                Some(RuleTarget::Command {
                    prefix: offered.into(),
                    exact: false
                }),
                "{line:?}"
            );
        }
        // A rule for `git` (offered by earlier versions for `git --version`) covers the
        // allow-listed subcommands only, never a code-running global option.
        let git = rule(
            Decision::Allow,
            RuleTarget::Command {
                prefix: "git".into(),
                exact: false,
            },
        );
        assert!(verdict(&[&git], &command("git --no-pager log", cwd)).is_some());
        assert!(
            verdict(&[&git], &command("git --version", cwd)).is_none(),
            "not a subcommand: asked again, and offered exactly"
        );
        assert!(verdict(&[&git], &command("git --exec-path=./gx status", cwd)).is_none());
    }

    /// A subagent's argv is judged as the `sh` line that runs exactly it: a program path with
    /// a space, a tab or a quote is one quoted word, which no rule for its first word covers.
    #[test]
    fn an_argv_is_read_as_the_sh_line_that_runs_it() {
        let cwd = Path::new("/w");
        let ls = rule(
            Decision::Allow,
            RuleTarget::Command {
                prefix: "ls".into(),
                exact: false,
            },
        );
        for (argv, line) in [
            (&["ls x/run.sh"][..], "'ls x/run.sh'"),
            (&["ls\tx/run.sh"][..], "'ls\tx/run.sh'"),
            (&["ls", "a b"][..], "ls 'a b'"),
            (&["ls", "it's"][..], "ls 'it'\\''s'"),
            (&["ls", ""][..], "ls ''"),
            (&["ls", "$(id)"][..], "ls '$(id)'"),
            (&["A=1", "ls"][..], "'A=1' ls"),
        ] {
            assert_eq!(shell_line(argv), line);
            // `sh` splits the line back into exactly these words.
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf '%s\\0' {line}"))
                .output()
                .unwrap();
            let words: Vec<&[u8]> = out.stdout.split(|&b| b == 0).collect();
            let want: Vec<&[u8]> = argv
                .iter()
                .map(|w| w.as_bytes())
                .chain([&b""[..]])
                .collect();
            assert_eq!(words, want, "{line}");
            assert!(
                verdict(&[&ls], &command(line, cwd)).is_none(),
                "{argv:?} must ask, not run under `ls`"
            );
        }
        assert_eq!(shell_line(&["ls", "-la", "src/"]), "ls -la src/");
        assert!(verdict(&[&ls], &command(&shell_line(&["ls", "-la"]), cwd)).is_some());
    }

    #[test]
    fn a_reject_rule_finds_its_program_however_the_command_hides_it() {
        let cwd = Path::new("/w");
        let deny = rule(
            Decision::Deny,
            RuleTarget::Command {
                prefix: "rm".into(),
                exact: false,
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

    /// What a command would read outside the workspace, found as `read_file` finds its path
    /// (links followed) and, for recursive readers, through the links below its folders.
    #[test]
    fn what_a_command_reads_outside_is_found_through_links() {
        use std::os::unix::fs::symlink;
        let base = std::env::temp_dir().join(format!(
            "maka-reads-{}-{}",
            std::process::id(),
            crate::host_api::wire::now_ms()
        ));
        let (ws, out) = (base.join("ws"), base.join("out"));
        for d in [ws.join("src"), ws.join("docs/deep"), out.join("keys")] {
            std::fs::create_dir_all(d).unwrap();
        }
        let base = std::fs::canonicalize(&base).unwrap();
        let (ws, out) = (base.join("ws"), base.join("out"));
        let (secret, keys) = (out.join("secret.txt"), out.join("keys"));
        std::fs::write(&secret, "s").unwrap();
        std::fs::write(ws.join("src/a.txt"), "a").unwrap();
        symlink(&secret, ws.join("notes.txt")).unwrap();
        symlink(&keys, ws.join("vendor")).unwrap();
        symlink(&keys, ws.join("docs/deep/more")).unwrap();
        // A link to a folder inside is followed: what is below it counts too.
        symlink(ws.join("docs"), ws.join("src/docs-link")).unwrap();
        symlink("../src", ws.join("docs/up")).unwrap(); // a loop, walked once
                                                        // `diff` given folders compares same-named files, `-r` or not, following links.
        for d in [ws.join("cmp/a"), ws.join("cmp/b")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(ws.join("cmp/a/notes.txt"), "a").unwrap();
        symlink("../../../out/secret.txt", ws.join("cmp/b/notes.txt")).unwrap();
        let roots = [ws.clone()];
        let reads = |c: &str| outside_reads(c, &ws, &roots);
        let outside = |p: &[&PathBuf]| Reads::Outside(p.iter().map(|p| p.to_path_buf()).collect());
        for (command, want) in [
            ("cat src/a.txt", outside(&[])),
            ("cat notes.txt", outside(&[&secret])),
            ("head -n5 ./notes.txt", outside(&[&secret])),
            ("jq -fnotes.txt x", outside(&[&secret])),
            ("grep --file=notes.txt x src/a.txt", outside(&[&secret])),
            (
                "cat /nowhere-maka/x",
                outside(&[&PathBuf::from("/nowhere-maka/x")]),
            ),
            ("cut -d/ -f1 src/a.txt", outside(&[])),
            ("grep token docs", outside(&[])),
            ("ls docs/deep", outside(&[])),
            ("grep -R token vendor", outside(&[&keys])),
            ("grep -rn token docs", outside(&[&keys])),
            ("grep -r token src", outside(&[&keys])),
            ("grep -n --recursive token docs/deep", outside(&[&keys])),
            ("grep -r token src/a.txt", outside(&[])),
            ("grep -r token", outside(&[&keys, &secret])),
            ("grep -r -A 3 token", outside(&[&keys, &secret])),
            ("grep -r -e token", outside(&[&keys, &secret])),
            ("ls -R", outside(&[&keys, &secret])),
            ("du -sh docs", outside(&[&keys])),
            ("find . -name x", outside(&[&keys, &secret])),
            ("find -name x", outside(&[&keys, &secret])),
            ("diff -r src docs", outside(&[&keys])),
            ("diff cmp/a cmp/b", outside(&[&secret])),
            ("diff cmp/a/notes.txt cmp/b", outside(&[&secret])),
            ("diff -u cmp/a/notes.txt src/a.txt", outside(&[])),
            ("diff src docs", outside(&[&keys])),
            ("git log -5", outside(&[])),
        ] {
            assert_eq!(reads(command), want, "{command:?}");
        }
        // Past the bounds it is not checked: the person is asked.
        let long = format!("cat -{}", "x".repeat(READ_CANDIDATE_LIMIT + 10));
        assert!(matches!(reads(&long), Reads::Unchecked(_)));
        let big = ws.join("big");
        std::fs::create_dir_all(&big).unwrap();
        for i in 0..=READ_WALK_LIMIT {
            std::fs::File::create(big.join(i.to_string())).unwrap();
        }
        assert!(matches!(reads("grep -r x big"), Reads::Unchecked(_)));
        assert_eq!(reads("grep x big/1"), outside(&[]));
        std::fs::remove_dir_all(&base).unwrap();
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
