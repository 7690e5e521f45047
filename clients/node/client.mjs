// A paddleray client in Node.js, from the repo's .proto files and nothing generated:
// creates a training job, watches it to its end (resuming after a dropped stream), finds it in
// the job list, reads its logs, and (with --inference) calls the Open Inference Protocol v2
// endpoint. Prints one JSON object per line, for people and for tests/e2e/cli/test_node_client.py.
//
//   node client.mjs --scheduler 127.0.0.1:50051 [--token T] [--inference 127.0.0.1:9000]
//                   [--entrypoint pkg.mod:fn] [--config '{"epochs": 1}'] [--env KEY=VALUE]
//                   [--model NAME --input-shape 1,64]
//
// Exit code: 0 when the job SUCCEEDED (and the v2 calls answered), 1 otherwise.

import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const PROTOS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../protos");
const TERMINAL = new Set([
  "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_TIMED_OUT", "JOB_STATE_EARLY_STOPPED",
]);

// proto-loader resolves google/protobuf/*.proto (Struct, Timestamp, Duration) from the copies
// protobufjs ships; the repo's own files are found under includeDirs.
function load(file) {
  const definition = protoLoader.loadSync(file, {
    includeDirs: [PROTOS], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  });
  return grpc.loadPackageDefinition(definition);
}

function emit(record) {
  console.log(JSON.stringify(record));
}

function metadata(token) {
  const md = new grpc.Metadata();
  if (token) md.set("authorization", `Bearer ${token}`);
  return md;
}

function unary(client, method, request, md, timeoutS = 30) {
  return new Promise((resolve, reject) => {
    client[method](request, md, { deadline: Date.now() + timeoutS * 1000 }, (error, response) =>
      error ? reject(error) : resolve(response));
  });
}

// google.protobuf.Struct as proto-loader wants it: {fields: {k: {numberValue: 1}}}. The
// well-known types come from protobufjs' bundled definitions, whose field names are camelCase
// even with keepCase (which applies to the files it parses: ours stay snake_case).
function toValue(value) {
  if (value === null) return { nullValue: "NULL_VALUE" };
  if (typeof value === "number") return { numberValue: value };
  if (typeof value === "string") return { stringValue: value };
  if (typeof value === "boolean") return { boolValue: value };
  if (Array.isArray(value)) return { listValue: { values: value.map(toValue) } };
  return { structValue: toStruct(value) };
}

function toStruct(object) {
  return { fields: Object.fromEntries(Object.entries(object).map(([k, v]) => [k, toValue(v)])) };
}

// WatchJob from after_sequence; on UNAVAILABLE it reconnects after the last event it saw.
async function watch(jobs, name, md) {
  let after = 0;
  let backoff = 200;
  for (;;) {
    try {
      await new Promise((resolve, reject) => {
        const stream = jobs.WatchJob({ name, after_sequence: after }, md);
        stream.on("data", ({ event }) => {
          const sequence = Number(event.sequence);
          if (sequence <= after) return;
          after = sequence;
          backoff = 200;
          const payload = event.payload;
          emit({ step: "event", sequence, kind: payload, detail: event[payload] });
        });
        stream.on("error", reject);
        stream.on("end", resolve);
      });
      return;
    } catch (error) {
      if (error.code !== grpc.status.UNAVAILABLE) throw error;
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 5000);
    }
  }
}

function readLogs(jobs, name, md) {
  return new Promise((resolve, reject) => {
    const lines = [];
    const stream = jobs.GetJobLogs({ name }, md);
    stream.on("data", (response) => lines.push(...response.lines));
    stream.on("error", reject);
    stream.on("end", () => resolve(lines));
  });
}

async function inference(address, md, model, shape) {
  const { inference } = load("paddleray/inference/v2/grpc_service.proto");
  const v2 = new inference.GRPCInferenceService(address, grpc.credentials.createInsecure());
  // Serve's HAProxy sends each call to the application its `application` metadata names: the
  // model's serving name (server-level calls too: any model's app answers them).
  if (model) {
    md = md.clone();
    md.set("application", model);
  }
  const live = await unary(v2, "ServerLive", {}, md);
  const ready = await unary(v2, "ServerReady", {}, md);
  emit({ step: "inference", live: live.live, ready: ready.ready });
  let ok = live.live && ready.ready;
  if (model) {
    const dims = shape.split(",").map(Number);
    const count = dims.reduce((a, b) => a * b, 1);
    const response = await unary(v2, "ModelInfer", {
      model_name: model,
      inputs: [{ name: "x", datatype: "FP32", shape: dims, contents: { fp32_contents: Array(count).fill(0.5) } }],
    }, md);
    const output = response.outputs[0];
    const raw = response.raw_output_contents?.[0];
    const values = raw && raw.length ? Array.from(new Float32Array(raw.buffer, raw.byteOffset, raw.length / 4))
      : output.contents.fp32_contents;
    emit({ step: "infer", model: response.model_name, output: output.name, shape: output.shape.map(Number), values });
    ok = ok && values.length > 0;
  }
  v2.close();
  return ok;
}

async function main() {
  const { values: args } = parseArgs({
    options: {
      scheduler: { type: "string" }, inference: { type: "string" }, token: { type: "string", default: "" },
      entrypoint: { type: "string", default: "paddleray.services.trainer.examples.digits_mlp:train" },
      config: { type: "string", default: '{"epochs": 1}' }, env: { type: "string", multiple: true, default: [] },
      model: { type: "string" }, "input-shape": { type: "string", default: "1,64" },
    },
  });
  const md = metadata(args.token || process.env.PADDLERAY_TOKEN || "");
  let ok = true;
  if (args.scheduler) {
    const { paddleray } = load("paddleray/scheduler/v1/job_service.proto");
    const jobs = new paddleray.scheduler.v1.JobService(args.scheduler, grpc.credentials.createInsecure());
    const envVars = Object.fromEntries(args.env.map((item) => item.split(/=(.*)/s).slice(0, 2)));
    const job = {
      display_name: "from node",
      labels: { client: "node" },
      spec: {
        entrypoint: args.entrypoint, num_workers: 1, config: toStruct(JSON.parse(args.config)),
        resources_per_worker: { num_cpus: 1 }, runtime_env: { env_vars: envVars },
      },
    };
    const requestId = `node-${process.pid}-${Date.now()}`;
    const created = (await unary(jobs, "CreateJob", { job, request_id: requestId }, md)).job;
    emit({ step: "created", name: created.name, state: created.state });
    await watch(jobs, created.name, md);
    const finished = (await unary(jobs, "GetJob", { name: created.name }, md)).job;
    emit({ step: "finished", name: finished.name, state: finished.state, terminal: TERMINAL.has(finished.state),
      metrics: finished.latest_metrics?.metrics ?? {} });
    const listed = (await unary(jobs, "ListJobs", { page_size: 100, labels: { client: "node" } }, md)).jobs;
    emit({ step: "listed", count: listed.length, found: listed.some((j) => j.name === created.name) });
    const lines = await readLogs(jobs, created.name, md);
    emit({ step: "logs", count: lines.length, lines: lines.map((l) => `[rank ${l.rank}] ${l.text}`) });
    jobs.close();
    ok = finished.state === "JOB_STATE_SUCCEEDED";
  }
  if (args.inference) ok = (await inference(args.inference, md, args.model, args["input-shape"])) && ok;
  process.exitCode = ok ? 0 : 1;
}

main().catch((error) => {
  emit({ step: "error", code: error.code, message: error.details ?? error.message });
  process.exitCode = 1;
});
