//! A file change as ACP v2's structured diff: what changed (`changes`: the file, added or
//! modified, text) and, when the host sent the whole unified diff, the patch `git apply`
//! takes (`git_patch`: absolute paths, no `a/`/`b/` prefixes, `/dev/null` for a new file's
//! missing side). The host's diff names the file as the person sees it (relative to the
//! working directory); the patch's header is rewritten with the absolute path, its hunks kept.

use super::types::{DiffChange, DiffOperation, DiffPatch, ToolCallContent};
use crate::host_api::wire::FileDiff;

/// What the host appends to a diff it cut: such a patch would not apply, so none is sent.
const CUT_MARK: &str = "[diff truncated:";

pub fn content(d: &FileDiff) -> ToolCallContent {
    let added = d.old_text.is_none();
    ToolCallContent::Diff {
        changes: vec![DiffChange {
            operation: if added {
                DiffOperation::Add
            } else {
                DiffOperation::Modify
            },
            path: d.path.clone(),
        }],
        patch: git_patch(&d.path, added, &d.unified_diff).map(|text| DiffPatch {
            format: "git_patch".into(),
            text,
        }),
    }
}

/// The host's unified diff with a git header for `path`; `None` when it cannot be one (a
/// relative path, a cut diff, no hunks).
fn git_patch(path: &str, added: bool, unified: &str) -> Option<String> {
    if !path.starts_with('/') || unified.contains(CUT_MARK) || path.contains(['\n', '"']) {
        return None;
    }
    let hunks = unified.find("\n@@ ").map(|i| &unified[i + 1..])?;
    let mut out = format!("diff --git {path} {path}\n");
    if added {
        out.push_str(&format!(
            "new file mode 100644\n--- /dev/null\n+++ {path}\n"
        ));
    } else {
        out.push_str(&format!("--- {path}\n+++ {path}\n"));
    }
    out.push_str(hunks);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diff(path: &str, old: Option<&str>, unified: &str) -> FileDiff {
        FileDiff {
            path: path.into(),
            old_text: old.map(String::from),
            new_text: String::new(),
            unified_diff: unified.into(),
        }
    }

    #[test]
    fn a_new_file_and_a_change_get_absolute_git_headers_and_a_cut_diff_no_patch() {
        let add = git_patch(
            "/w/notes.md",
            true,
            "--- a/notes.md\n+++ b/notes.md\n@@ -0,0 +1,1 @@\n+hi\n",
        );
        assert_eq!(
            add.as_deref(),
            Some("diff --git /w/notes.md /w/notes.md\nnew file mode 100644\n--- /dev/null\n+++ /w/notes.md\n@@ -0,0 +1,1 @@\n+hi\n")
        );
        let modify = git_patch(
            "/w/a.txt",
            false,
            "--- a/a.txt\n+++ b/a.txt\n@@ -1,1 +1,1 @@\n-x\n+y\n",
        );
        assert_eq!(
            modify.as_deref(),
            Some("diff --git /w/a.txt /w/a.txt\n--- /w/a.txt\n+++ /w/a.txt\n@@ -1,1 +1,1 @@\n-x\n+y\n")
        );
        let cut = "--- a/a\n+++ b/a\n@@ -1,1 +1,1 @@\n-x\n[diff truncated: 9 more bytes]\n";
        assert_eq!(git_patch("/w/a", false, cut), None);
        assert_eq!(
            git_patch("a.txt", false, "--- a/a\n+++ b/a\n@@ -1 +1 @@\n"),
            None
        );
        let c = content(&diff(
            "/w/n",
            None,
            "--- a/n\n+++ b/n\n@@ -0,0 +1,1 @@\n+z\n",
        ));
        let ToolCallContent::Diff { changes, patch } = c else {
            panic!("a diff");
        };
        assert_eq!(changes[0].operation, DiffOperation::Add);
        assert!(patch.is_some());
    }

    /// The patch is what `git apply` takes (where git is installed).
    #[test]
    fn git_applies_the_patch() {
        let dir = std::env::temp_dir().join(format!("maka-v2-diff-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("a.txt");
        std::fs::write(&file, "one\ntwo\n").unwrap();
        let path = file.display().to_string();
        let unified = "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+three\n";
        let patch = git_patch(&path, false, unified).unwrap();
        let new = dir.join("b.txt").display().to_string();
        let added = git_patch(
            &new,
            true,
            "--- a/b.txt\n+++ b/b.txt\n@@ -0,0 +1,1 @@\n+hi\n",
        )
        .unwrap();
        std::fs::write(dir.join("p.patch"), format!("{patch}{added}")).unwrap();
        let run = std::process::Command::new("git")
            .args(["apply", "--unsafe-paths", "-p0", "--directory=/", "p.patch"])
            .current_dir(&dir)
            .output();
        let Ok(run) = run else {
            return; // no git here
        };
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\nthree\n");
        assert_eq!(std::fs::read_to_string(dir.join("b.txt")).unwrap(), "hi\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
