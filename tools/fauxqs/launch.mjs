// Starts fauxqs, the SQS emulator adaptq's queue/sqs tests and benchmarks
// run against, on the loopback only (its own CLI binds 0.0.0.0), on the
// port in $FAUXQS_PORT (0, the default: a free one), and prints the
// address it bound. queue/sqs/sqstest runs it as `node launch.mjs`.
//
// Queue URLs name the region (sqs.REGION.localhost), so that queues of the
// same name in different regions, which the tests use to isolate
// themselves, are different queues.
import { buildApp } from "fauxqs";

const app = buildApp({ logger: false, host: "localhost" });
const address = await app.listen({ host: "127.0.0.1", port: Number(process.env.FAUXQS_PORT ?? 0) });
console.log(`fauxqs listening on ${address}`);

for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, () => {
    app.close().finally(() => process.exit(0));
  });
}
