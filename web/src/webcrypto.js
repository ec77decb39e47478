/**
 * The browser's crypto for apr_core's provider interface (apr_core/crypto): Ed25519,
 * AES-256-GCM and X25519 from WebCrypto, Argon2id from hash-wasm. The Python provider in
 * apr_web.py calls these and waits for them with Pyodide's `run_sync` (JSPI), because the
 * provider interface is synchronous and WebCrypto is not.
 *
 * Private keys enter WebCrypto as PKCS#8: a fixed 16-byte DER prefix (RFC 8410) + 32 bytes.
 */
const PKCS8_PREFIX = {
  Ed25519: [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20],
  X25519: [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x04, 0x22, 0x04, 0x20],
};
const subtle = crypto.subtle;

const pkcs8 = (algorithm, raw) => Uint8Array.from([...PKCS8_PREFIX[algorithm], ...raw]);
const fromBase64Url = (text) => Uint8Array.from(atob(text.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));

async function privateKey(algorithm, raw, usages) {
  return subtle.importKey("pkcs8", pkcs8(algorithm, raw), { name: algorithm }, true, usages);
}

async function publicFromPrivate(algorithm, raw, usages) {
  const jwk = await subtle.exportKey("jwk", await privateKey(algorithm, raw, usages));
  return fromBase64Url(jwk.x);
}

async function aesKey(raw, usage) {
  return subtle.importKey("raw", raw, { name: "AES-GCM" }, false, [usage]);
}

/** Operations by the names of apr_core.crypto.OPERATIONS; all take and return Uint8Arrays.
 * A failed authentication (AES-GCM tag, low-order X25519 key) resolves to undefined. */
export const webCrypto = {
  public_key_ed25519: (seed) => publicFromPrivate("Ed25519", seed, ["sign"]),
  async sign_ed25519(seed, message) {
    const key = await privateKey("Ed25519", seed, ["sign"]);
    return new Uint8Array(await subtle.sign("Ed25519", key, message));
  },
  async verify_ed25519(publicKey, message, signature) {
    try {
      const key = await subtle.importKey("raw", publicKey, { name: "Ed25519" }, false, ["verify"]);
      return await subtle.verify("Ed25519", key, signature, message);
    } catch (err) {
      return false;  // a malformed key is a failed verification, not an error
    }
  },
  async encrypt_aes256gcm(key, nonce, plaintext, aad) {
    const params = { name: "AES-GCM", iv: nonce, additionalData: aad, tagLength: 128 };
    return new Uint8Array(await subtle.encrypt(params, await aesKey(key, "encrypt"), plaintext));
  },
  async decrypt_aes256gcm(key, nonce, ciphertext, aad) {
    const params = { name: "AES-GCM", iv: nonce, additionalData: aad, tagLength: 128 };
    try {
      return new Uint8Array(await subtle.decrypt(params, await aesKey(key, "decrypt"), ciphertext));
    } catch (err) {
      return undefined;  // becomes None in Python (null would be a JsNull proxy)
    }
  },
  public_key_x25519: (priv) => publicFromPrivate("X25519", priv, ["deriveBits"]),
  async x25519(priv, peerPublic) {
    try {
      const mine = await privateKey("X25519", priv, ["deriveBits"]);
      const peer = await subtle.importKey("raw", peerPublic, { name: "X25519" }, false, []);
      return new Uint8Array(await subtle.deriveBits({ name: "X25519", public: peer }, mine, 256));
    } catch (err) {
      return undefined;  // becomes None in Python (null would be a JsNull proxy)
    }
  },
  async argon2id(password, salt, mCost, tCost, pCost, length) {
    const { argon2id } = await import("../node_modules/hash-wasm/dist/index.esm.js");
    return argon2id({ password, salt, memorySize: mCost, iterations: tCost, parallelism: pCost,
      hashLength: length, outputType: "binary" });
  },
};
