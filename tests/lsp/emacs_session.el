;;; emacs_session.el --- a scripted eglot session against `stridelens serve' -*- lexical-binding: t -*-

;; Run by test_emacs.py as `emacs --batch -l emacs_session.el' (site-start is loaded, so a
;; Debian elpa-eglot or Emacs 29's built-in eglot is found; -batch skips the user's init).
;; Environment:
;;   STRIDELENS_README_ELISP  a file holding the README's ```elisp block (loaded as-is)
;;   STRIDELENS_CONFIG_FORM   the README's `eglot-workspace-configuration' form, to evaluate
;;   STRIDELENS_FILE          the Python file to open
;;   STRIDELENS_PIDFILE       where to write the server's pid (the test kills it if left over)
;; Prints one JSON object a line on stdout, the results the test checks.  Exits 0 on success,
;; 77 when eglot cannot be loaded, non-zero with the reason on stderr on any failure.

(require 'json)

(defun sl-emit (&rest plist)
  (princ (json-serialize plist))
  (terpri))

(defun sl-fail (fmt &rest args)
  (error "emacs-session: %s" (apply #'format fmt args)))

(defun sl-wait (what timeout pred)
  "Poll PRED (serving process output and timers) until non-nil or TIMEOUT seconds."
  (let ((deadline (+ (float-time) timeout))
        result)
    (while (and (not (setq result (funcall pred)))
                (< (float-time) deadline))
      (accept-process-output nil 0.1))
    (or result (sl-fail "timed out after %s s waiting for %s" timeout what))))

(defun sl-diagnostics ()
  "The buffer's Flymake diagnostics, as the user sees them: line, column, type, text."
  (vconcat
   (mapcar (lambda (d)
             (let ((beg (flymake-diagnostic-beg d)))
               (save-excursion
                 (goto-char beg)
                 (list :line (line-number-at-pos beg t)
                       :column (- beg (line-beginning-position))
                       :type (symbol-name (flymake-diagnostic-type d))
                       :text (flymake-diagnostic-text d)))))
           (sort (flymake-diagnostics) (lambda (a b) (< (flymake-diagnostic-beg a)
                                                        (flymake-diagnostic-beg b)))))))

(defun sl-has-code (code)
  (cl-some (lambda (d) (string-match-p (regexp-quote (format "[%s]" code))
                                       (flymake-diagnostic-text d)))
           (flymake-diagnostics)))

(defun sl-hover (server where regexp)
  "Hover at the first match of REGEXP's group 1 (or its start); emit and return its text."
  (goto-char (point-min))
  (unless (re-search-forward regexp nil t) (sl-fail "no %S in the buffer" regexp))
  (goto-char (or (match-beginning 1) (match-beginning 0)))
  (let* ((line (line-number-at-pos nil t))
         (column (current-column))
         (reply (jsonrpc-request server :textDocument/hover
                                 (eglot--TextDocumentPositionParams)
                                 :timeout 30))
         (contents (plist-get reply :contents))
         ;; What eldoc shows for this hover (eglot-hover-eldoc-function's rendering).
         (text (if (seq-empty-p contents) "" (substring-no-properties (eglot--hover-info contents)))))
    (sl-emit :event "hover" :where where :line line :column column
             :kind (or (and (listp contents) (plist-get contents :kind)) "") :text text)
    text))

(defun sl-main ()
  ;; The README's setup, loaded the way a user's init would (before eglot is loaded).
  (load (getenv "STRIDELENS_README_ELISP") nil t t)
  (unless (require 'eglot nil t)
    (require 'package)
    (package-initialize)
    (unless (require 'eglot nil t)
      (princ "emacs-session: eglot is not installed\n")
      (kill-emacs 77)))
  (sl-emit :event "versions" :emacs emacs-version
           :eglot (or (and (fboundp 'eglot--version) (eglot--version))
                      (let ((lib (locate-library "eglot")))
                        (if lib (file-name-directory lib) "")))
           :python (or (executable-find "python") ""))
  (add-hook 'python-mode-hook #'eglot-ensure)
  (find-file (getenv "STRIDELENS_FILE"))
  (unless (memq major-mode '(python-mode python-ts-mode))
    (sl-fail "opened in %s, not python-mode" major-mode))
  ;; eglot-ensure connects from post-command-hook: no command loop in batch, so run it here.
  (run-hooks 'post-command-hook)
  (let ((server (sl-wait "eglot to connect" 60
                         (lambda () (and eglot--managed-mode (eglot-current-server))))))
    (with-temp-file (getenv "STRIDELENS_PIDFILE")
      (insert (format "%d\n" (process-id (jsonrpc--process server)))))
    (unwind-protect
        (progn
          (sl-emit :event "server"
                   :command (vconcat (process-command (jsonrpc--process server)))
                   :initializationOptions (eglot-initialization-options server))
          ;; Flymake calls eglot's backend, which then reports each publishDiagnostics.
          (flymake-start)
          (sl-wait "an SL101 diagnostic" 90 (lambda () (sl-has-code "SL101")))
          (sl-emit :event "diagnostics" :when "initial" :items (sl-diagnostics))
          (sl-hover server "xt" "^\\(xt\\) = ")
          (sl-hover server "view" "^fails = xt\\.\\(view\\)")
          ;; The README's workspace-configuration form, then a didChangeConfiguration: the
          ;; server pulls workspace/configuration, eglot answers from the variable.
          (eval (car (read-from-string (getenv "STRIDELENS_CONFIG_FORM"))) t)
          (eglot-signal-didChangeConfiguration server)
          (sl-wait "SL101 to go after the configuration change" 60
                   (lambda () (and (not (sl-has-code "SL101")) (sl-has-code "SL103"))))
          (sl-emit :event "diagnostics" :when "configured" :items (sl-diagnostics)))
      (when (jsonrpc-running-p server)
        (eglot-shutdown server nil 5)))
    (sl-emit :event "shutdown" :running (if (jsonrpc-running-p server) t :false))))

;; Watchdog: a hang must not outlive the test's own timeout.
(run-at-time 150 nil (lambda ()
                       (message "emacs-session: watchdog: session took over 150 s")
                       (kill-emacs 90)))

(condition-case err
    (progn (sl-main)
           (princ "emacs-session: ok\n")
           (kill-emacs 0))
  (error
   (message "emacs-session: %s" (error-message-string err))
   (kill-emacs 1)))

;;; emacs_session.el ends here
