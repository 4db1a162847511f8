// Starts fauxqs, the SQS emulator adaptq's queue/sqs tests and benchmarks
// run against, on the loopback only (its own CLI binds 0.0.0.0), on the
// port in $FAUXQS_PORT (0, the default: a free one), and prints the
// address it bound. queue/sqs/sqstest runs it as `node launch.mjs`.
//
// Queue URLs name the region (sqs.REGION.localhost), so that queues of the
// same name in different regions, which the tests use to isolate
// themselves, are different queues.
//
// With FAUXQS_CLOCK_CONTROL=1 the server's clock can be moved, for tests
// of clients whose clocks disagree with SQS's: GET
// /_adaptq/clock?offset_ms=N sets the offset of Date.now (which fauxqs
// reads for every timestamp, visibility timeout and delay) from the
// system's clock, and every answer's Date header is written from that
// clock, as SQS's are from its own.
import { buildApp } from "fauxqs";

const app = buildApp({ logger: false, host: "localhost" });

if (process.env.FAUXQS_CLOCK_CONTROL === "1") {
  const systemNow = Date.now;
  let offset = 0;
  Date.now = () => systemNow() + offset;
  app.addHook("onSend", async (request, reply, payload) => {
    reply.header("date", new Date(Date.now()).toUTCString());
    return payload;
  });
  app.get("/_adaptq/clock", async (request, reply) => {
    const ms = Number(request.query.offset_ms ?? "0");
    if (!Number.isFinite(ms)) {
      reply.code(400);
      return { error: "offset_ms is not a number" };
    }
    offset = ms;
    return { offset_ms: offset };
  });
}

const address = await app.listen({ host: "127.0.0.1", port: Number(process.env.FAUXQS_PORT ?? 0) });
console.log(`fauxqs listening on ${address}`);

for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, () => {
    app.close().finally(() => process.exit(0));
  });
}
