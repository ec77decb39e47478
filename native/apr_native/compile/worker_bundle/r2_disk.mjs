// An R2-style bucket binding over a workerd `disk` service, for running a worker bundle
// locally (workerd has no R2 of its own): the part of R2's API the worker uses.
//
//   head(key)                         -> {key, size} or null
//   get(key, {range: {offset, length}}) -> {key, size, range, arrayBuffer()} or null
//
// workerd/config.capnp declares it as an internal extension module and binds it as
// `MODEL` (a wrapped binding whose inner binding `files` is the disk service). On
// Cloudflare, MODEL is a real R2 bucket and this file is not used.

class ObjectBody {
  constructor(key, size, range, bytes) {
    this.key = key;
    this.size = size;
    this.range = range;
    this._bytes = bytes;
  }

  async arrayBuffer() {
    return this._bytes;
  }
}

class DiskBucket {
  constructor(files) {
    this.files = files;
  }

  _url(key) {
    return "http://model-files/" + key.split("/").map(encodeURIComponent).join("/");
  }

  async head(key) {
    const response = await this.files.fetch(this._url(key), { method: "HEAD" });
    if (response.status === 404) return null;
    if (!response.ok) throw new Error(`model files: HTTP ${response.status} for ${key}`);
    return { key, size: Number(response.headers.get("content-length")) };
  }

  async get(key, options) {
    const range = options && options.range;
    const headers = {};
    if (range) headers.range = `bytes=${range.offset}-${range.offset + range.length - 1}`;
    const response = await this.files.fetch(this._url(key), { headers });
    if (response.status === 404) return null;
    if (!response.ok) throw new Error(`model files: HTTP ${response.status} for ${key}`);
    const bytes = await response.arrayBuffer();
    if (range && response.status !== 206 && bytes.byteLength !== range.length) {
      // a server that ignores Range sends the whole object: cut the range out of it
      return new ObjectBody(key, bytes.byteLength, range,
                            bytes.slice(range.offset, range.offset + range.length));
    }
    return new ObjectBody(key, null, range || null, bytes);
  }
}

export default function makeBucket(env) {
  return new DiskBucket(env.files);
}
