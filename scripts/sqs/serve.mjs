// The local SQS server of `make test` and `make run` (scripts/devstack.sh):
// fauxqs, which speaks SQS's JSON protocol as aws-sdk-go-v2 does, served on
// 127.0.0.1 only (its own CLI listens on every interface). State is in
// memory: queues vanish when it stops.
//
//   node serve.mjs            SQS_PORT (8767), AWS_REGION (us-east-1)
import { buildApp } from "fauxqs";

const port = Number(process.env.SQS_PORT ?? "8767");
const app = buildApp({ logger: false, defaultRegion: process.env.AWS_REGION || "us-east-1" });
await app.listen({ port, host: "127.0.0.1" });
console.log(`fauxqs listening on 127.0.0.1:${port}`);
for (const signal of ["SIGTERM", "SIGINT"]) {
	process.on(signal, () => {
		app.close().then(() => process.exit(0));
	});
}
