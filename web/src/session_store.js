/**
 * IndexedDB store of chat sessions (`.aprs` files, see apr_websession.py), by name: apart
 * from the model cache, so evicting shards never drops a conversation. The bytes are the
 * file `apr chat --session` writes; they are validated by Python, never here.
 */
import { done, promised, quotaError } from "./shard_cache.js";

const SESSIONS = "sessions";

export class SessionStore {
  constructor(dbName = "apr-sessions") {
    this.dbName = dbName;
    this._db = null;
  }

  async db() {
    if (!this._db) {
      const request = indexedDB.open(this.dbName, 1);
      request.onupgradeneeded = () => request.result.createObjectStore(SESSIONS, { keyPath: "name" });
      this._db = await promised(request);
    }
    return this._db;
  }

  /** The session's bytes (Uint8Array), or null. */
  async get(name) {
    const tx = (await this.db()).transaction(SESSIONS, "readonly");
    const record = await promised(tx.objectStore(SESSIONS).get(name));
    return record ? new Uint8Array(record.bytes) : null;
  }

  async put(name, bytes) {
    const tx = (await this.db()).transaction(SESSIONS, "readwrite");
    const copy = bytes.slice().buffer;  // its own buffer, not a view of Pyodide's heap
    tx.objectStore(SESSIONS).put({ name, bytes: copy, size: copy.byteLength, saved: Date.now() });
    try {
      await done(tx);
    } catch (err) {
      throw quotaError(err, `session ${name}`);
    }
  }

  /** `[{name, size, saved}]`. */
  async list() {
    const tx = (await this.db()).transaction(SESSIONS, "readonly");
    const records = await promised(tx.objectStore(SESSIONS).getAll());
    return records.map(({ name, size, saved }) => ({ name, size, saved }));
  }

  async remove(name) {
    const tx = (await this.db()).transaction(SESSIONS, "readwrite");
    tx.objectStore(SESSIONS).delete(name);
    await done(tx);
  }
}
