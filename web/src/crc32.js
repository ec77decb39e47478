/**
 * CRC-32 (IEEE 802.3, the zlib polynomial) over byte arrays, incrementally.
 * The shard cache checks the APR footer CRC with it before a shard is committed; which
 * bytes the CRC covers is told by the Python side, so this file knows nothing about formats.
 */
const TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** Continue a CRC: `crc32(b, crc32(a))` equals `crc32(a ++ b)`. Start with 0. */
export function crc32(bytes, previous = 0) {
  let c = (previous ^ 0xffffffff) >>> 0;
  for (let i = 0; i < bytes.length; i++) c = TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** A CRC as the manifest writes it: 8 lower-case hex digits. */
export const crcHex = (value) => value.toString(16).padStart(8, "0");
