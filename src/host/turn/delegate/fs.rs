//! A delegation's `fs/*` calls: paths resolved inside this session's folders, reads of what
//! the session sees now, writes through the model's own gate (recorded for undo).

use super::*;

impl Turn {
    /// The agent's path, resolved, inside this session's folders.
    pub(super) fn subagent_path(&self, p: &str) -> Result<PathBuf, ResponseError> {
        if !Path::new(p).is_absolute() {
            return Err(ResponseError::invalid_params("`path` must be absolute"));
        }
        let path = tool_fs::resolve(&self.cwd, p);
        if self.confinement.hides(&path) {
            return Err(ResponseError::new(
                code::INVALID_PARAMS,
                crate::host::sandbox::Confinement::refusal(&path),
            ));
        }
        if !self.may_touch(&path) {
            return Err(ResponseError::new(
                code::INVALID_PARAMS,
                format!("{} is outside this session's folders", path.display()),
            ));
        }
        Ok(path)
    }

    pub(super) fn subagent_read(&mut self, asked: &ReadTextFile) -> Result<Value, ResponseError> {
        let path = self.subagent_path(&asked.path)?;
        let text = tool_fs::current_text(self, &path).ok_or_else(|| {
            ResponseError::new(
                code::RESOURCE_NOT_FOUND,
                format!("{} cannot be read", path.display()),
            )
        })?;
        let line = asked.line.unwrap_or(1).max(1) as usize;
        let limit = asked.limit.map(|l| l as usize);
        let content: String = match (line, limit) {
            (1, None) => text,
            _ => text
                .split_inclusive('\n')
                .skip(line - 1)
                .take(limit.unwrap_or(usize::MAX))
                .collect(),
        };
        Ok(json!({ "content": content }))
    }

    /// `fs/write_text_file`, through the same gate as the model's own `write_file` (with the
    /// diff in the dialog), recorded for undo like every write.
    pub(super) fn subagent_write(
        &mut self,
        name: &str,
        asked: &WriteTextFile,
        approved: Option<Shown>,
    ) -> Result<Value, ResponseError> {
        let path = self.subagent_path(&asked.path)?;
        let content = asked.content.as_str();
        let args = json!({"path": path.display().to_string(), "content": content});
        let shown =
            matches!(&approved, Some(Shown::Write(p, Some(t))) if *p == path && t == content);
        let what = format!("write {}", tool_fs::display(&self.cwd, &path));
        self.subagent_gate(name, "write_file", &args, &what, shown)?;
        let old = tool_fs::current_text(self, &path);
        tool_fs::store(self, &path, old.as_deref(), content)
            .map(|()| json!({}))
            .map_err(|e| ResponseError::new(code::INTERNAL_ERROR, e))
    }
}
