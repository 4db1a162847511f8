// Package admin is a worker's admin HTTP endpoint: the routes operators,
// producers, probes and autoscalers call on the worker's admin address.
//
//   - the probes: HealthPath (/healthz, alive) and ReadyPath (/readyz,
//     every queue answering its gets), open without the token;
//   - MetricsPath (/metrics): the worker's Prometheus registry;
//   - StatsPath (/v1/stats): each queue's state, counters, calls and cost,
//     over the last minute and hour too (Stats, Window);
//   - ScalingPath (/v1/scaling): the instance-count signal an autoscaler
//     such as KEDA reads (Scaling);
//   - TriggerPath (POST /v1/queues/{name}/trigger): a producer in any
//     process or language wakes a queue's idle listeners (SendTrigger is
//     the Go client);
//   - the poison tools (PoisonPath …): list, show, requeue and purge a
//     queue's poison messages;
//   - the status page (StatusPath, /): one HTML page of every queue's
//     figures and poisoned messages, with a login (sessions) when the
//     endpoint has a token.
//
// Every route, the probes included, refuses a request a browser says
// another site made (Sec-Fetch-Site cross-site or same-site), with or
// without a token, before it runs: a web page cannot make its visitors
// call the worker's backend. Every route but the probes needs the token
// when one is set (CheckToken refuses one anyone could guess; wrong tokens
// are throttled per client address and summarised in the log, auth.go);
// without one, a request must name the endpoint by its address or a
// loopback name (DNS rebinding), and cross-origin requests that change
// state are refused. Either way the server bounds every read, write and
// body, and the connections it holds (MaxConns, limits.go), so that it
// never takes the file descriptors the handlers need. A poison listing
// only peeks, with backend calls bounded by its page (poison.List).
//
// The endpoint talks to the worker through the small Worker interface it
// defines; it never imports the worker host (package adaptq), which starts
// it: adaptq.Worker implements Worker, and its Run calls Start when
// admin.address is set. The JSON documents the routes serve (Stats,
// Scaling, PoisonPage …) are this package's types, which the worker fills
// and `adaptq stats` decodes.
//
// StartScaler serves the scaling signal and the probes alone, for a
// ScalingSource that runs no worker (`adaptq scaler`, adaptq.Scaler),
// behind the same guards (the same code: listen and serve).
package admin
