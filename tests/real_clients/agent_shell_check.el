;; Drives maka-acp through agent-shell (and acp.el, shell-maker) in batch Emacs, configured by
;; the agent-shell snippet of docs/editors.md as written: the command pointed at this build and
;; the model URL swapped for the scripted provider (inline JSON). Submits one prompt the way the
;; shell does and writes the shell buffer's text to $OUT. Run by scripts/editor-check.
(setq load-path (append (split-string (getenv "ELISP_DIRS") ":") load-path))
(require 'compat)
(setq debug-on-error nil)
(let* ((page (with-temp-buffer (insert-file-contents (getenv "DOCS_EDITORS")) (buffer-string)))
       (start (string-match "<!-- snippet: agent-shell -->\n```elisp\n" page))
       (body-start (match-end 0))
       (body-end (string-match "\n```" page body-start))
       (snippet (substring page body-start body-end)))
  (setq snippet (replace-regexp-in-string "\"maka-acp\"" (prin1-to-string (getenv "MAKA_BIN")) snippet t t))
  (setq snippet (replace-regexp-in-string "\"MAKA_OPENAI_BASE_URL\" \"[^\"]*\"" (concat "\"MAKA_SCRIPT\" " (prin1-to-string (getenv "SCRIPT_JSON"))) snippet t t))
  (with-temp-buffer
    (insert snippet)
    (goto-char (point-min))
    (condition-case nil
        (while t (eval (read (current-buffer)) t))
      (end-of-file nil))))
(defun wait-for (pred secs)
  (let ((deadline (+ (float-time) secs)))
    (while (and (not (funcall pred)) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (funcall pred)))
(let ((default-directory (file-name-as-directory (getenv "WS"))))
  (maka))
(let ((buf (seq-find (lambda (b) (string-match-p "Maka" (buffer-name b))) (buffer-list))))
  (message "buffer: %s" buf)
  (with-current-buffer buf
    (wait-for (lambda () (string-match-p "Maka> \\'" (buffer-substring-no-properties (point-min) (point-max)))) 20)
    (shell-maker-submit :input "hello from emacs")
    (wait-for (lambda () (string-match-p "Hello from the scripted model" (buffer-string))) 20)
    (wait-for (lambda () (save-excursion (goto-char (point-max)) (looking-back "Maka> " 10))) 10)
    (let ((text (buffer-substring-no-properties (point-min) (point-max))))
      (with-temp-file (getenv "OUT") (insert text)))))
(kill-emacs 0)
