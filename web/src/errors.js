/**
 * Errors the shell reports to the page. `code` is stable (the page and tests switch on it);
 * `message` is one line a user can act on.
 */
export class ShellError extends Error {
  constructor(code, message, detail = {}) {
    super(message);
    this.name = "ShellError";
    this.code = code;
    this.detail = detail;
  }

  toJSON() {
    return { code: this.code, message: this.message, detail: this.detail };
  }
}

/** Codes: network (HTTP/transport), checksum (sha256/CRC mismatch), quota (storage full),
 * aborted (cancelled), python (an AprError or exception raised by apr_core), boot. */
export const codes = Object.freeze({
  NETWORK: "network", CHECKSUM: "checksum", QUOTA: "quota", ABORTED: "aborted",
  PYTHON: "python", BOOT: "boot", ARGUMENT: "argument",
});

/** Any thrown value as a plain object that survives postMessage. */
export function toPlainError(err) {
  if (err instanceof ShellError) return err.toJSON();
  if (err && err.name === "QuotaExceededError") {
    return { code: codes.QUOTA, message: "browser storage is full: " + err.message, detail: {} };
  }
  return { code: codes.PYTHON, message: String(err && err.message || err), detail: {} };
}
