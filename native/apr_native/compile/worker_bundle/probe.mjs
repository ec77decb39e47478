// A JavaScript check of a worker bundle's layout and bindings, with no Python runtime:
// `workerd serve workerd/config.capnp probe` (from the bundle's directory) answers
//
//   GET /v1/models   the model list the Python worker gives, plus what the MODEL binding
//                    holds under the manifest's key: its size and first bytes (the magic)
//
// so a bundle whose config, manifest or model object is wrong shows it in one request,
// even where the Python runtime cannot start (workerd offline: see the bundle's README).

const JSON_HEADERS = { "content-type": "application/json; charset=utf-8" };

function answer(status, body) {
  return new Response(JSON.stringify(body), { status, headers: JSON_HEADERS });
}

async function modelObject(env, key) {
  const head = await env.MODEL.head(key);
  if (head === null) return null;
  const first = await env.MODEL.get(key, { range: { offset: 0, length: Math.min(8, head.size) } });
  const bytes = new Uint8Array(await first.arrayBuffer());
  const magic = String.fromCharCode(...bytes.subarray(0, 4));
  return { key, size: head.size, magic };
}

export default {
  async fetch(request, env) {
    const path = new URL(request.url).pathname.replace(/\/+$/, "");
    if (path !== "/v1/models") {
      return answer(404, { error: { message: `the probe answers GET /v1/models only, not ${path}`,
                                    type: "invalid_request_error", param: null, code: "not_found" } });
    }
    const manifest = env.MANIFEST;
    const model = manifest.model;
    const object = await modelObject(env, env.MODEL_KEY || model.key);
    return answer(200, {
      object: "list",
      data: [{ id: model.name, object: "model", created: Math.floor(Date.now() / 1000),
               owned_by: "apr",
               meta: { format: model.format, size: model.size, sha256: model.sha256,
                       apr_version: manifest.apr_version, runtime: "javascript probe",
                       model_object: object } }],
    });
  },
};
