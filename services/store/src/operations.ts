// The store's operations in the OpenAPI document: the storage report, purges and peer copies
// (staging/routes.ts), and pulls and the store host's registry, files and uploads
// (store-host/routes.ts).
import {
  jsonAnswer,
  ClusterStorageSchema,
  PullBodySchema,
  PullCancelResponseSchema,
  PullListResponseSchema,
  PullResponseSchema,
  PeerPiecesSchema,
  PurgeResponseSchema,
  PurgeStagingBodySchema,
  RemoveModelResponseSchema,
  StorageReportSchema,
  StoreHostResponseSchema,
  StoreManifestSchema,
  StoreModelListSchema,
  UploadAbortResponseSchema,
  UploadCommitResponseSchema,
  UploadFileResponseSchema,
} from "@ic/protocol";
import type { ApiOperation } from "@ic/protocol";

export const STORE_OPERATIONS: readonly ApiOperation[] = [
  {
    method: "get",
    path: "/store/storage",
    summary: "this node's storage report",
    scope: "read",
    responses: { "200": jsonAnswer("the report", StorageReportSchema) },
  },
  {
    method: "get",
    path: "/store/storage/cluster",
    summary: "every live node's storage report (peers asked with the node token, 2 s each)",
    scope: "read",
    responses: {
      "200": jsonAnswer("the reports and the nodes that did not answer", ClusterStorageSchema),
    },
  },
  {
    method: "post",
    path: "/store/purge-staging",
    summary: "purge staged copies not in use, on every node",
    scope: "admin",
    body: PurgeStagingBodySchema,
    responses: { "200": jsonAnswer("what each node deleted", PurgeResponseSchema) },
  },
  {
    method: "post",
    path: "/store/pulls",
    summary:
      "pull a model from the model hub into the store: one quantization (`quant`, else Q4_K_M, else the smallest), its projector and metadata; resumes a cancelled one",
    scope: "admin",
    body: PullBodySchema,
    responses: {
      "202": jsonAnswer("the pull, queued (or resumed)", PullResponseSchema),
      "200": jsonAnswer("the pull of that model already queued or running", PullResponseSchema),
    },
  },
  {
    method: "get",
    path: "/store/pulls",
    summary: "the store host's pulls",
    scope: "read",
    responses: { "200": jsonAnswer("the pulls", PullListResponseSchema) },
  },
  {
    method: "delete",
    path: "/store/pulls/{org}/{name}",
    summary:
      "cancel a queued or running pull (its partial files stay), or dismiss a finished one from the list",
    scope: "admin",
    responses: {
      "200": jsonAnswer("the cancelled or dismissed pull", PullCancelResponseSchema),
    },
  },
  {
    method: "delete",
    path: "/store/models/{org}/{name}",
    summary: "take a model out of the registry and the store (refused while in use)",
    scope: "admin",
    responses: { "200": jsonAnswer("removed", RemoveModelResponseSchema) },
  },
  {
    method: "get",
    path: "/store/models",
    summary: "store host: the registered models",
    scope: "read",
    responses: { "200": jsonAnswer("the models", StoreModelListSchema) },
  },
  {
    method: "get",
    path: "/store/models/{org}/{name}/manifest",
    summary: "store host: a model's manifest",
    scope: "read",
    responses: { "200": jsonAnswer("the manifest", StoreManifestSchema) },
  },
  {
    method: "get",
    path: "/store/models/{org}/{name}/files/{path}",
    summary: "store host: an artifact file (Range, If-Range)",
    scope: "read",
    responses: {
      "200": { description: "the file", contentType: "application/octet-stream" },
      "206": { description: "the requested range", contentType: "application/octet-stream" },
    },
  },
  {
    method: "head",
    path: "/store/models/{org}/{name}/files/{path}",
    summary: "store host: an artifact file's headers",
    scope: "read",
    responses: { "200": { description: "size and sha256 ETag" } },
  },
  {
    method: "get",
    path: "/store/staged/{org}/{name}/pieces",
    summary:
      "peers: the pieces of a model this node can serve (a complete staged copy: all; a copy being staged: its verified pieces); 404 without a copy",
    scope: "read",
    responses: { "200": jsonAnswer("its files and pieces", PeerPiecesSchema) },
  },
  {
    method: "get",
    path: "/store/staged/{org}/{name}/files/{path}",
    summary:
      "peers: a byte range of a staged file (Range: bytes=<start>-<end> required, else 400; 409 while a piece of it is not verified here, or for another version under If-Range)",
    scope: "read",
    responses: {
      "206": { description: "the requested range", contentType: "application/octet-stream" },
    },
  },
  {
    method: "get",
    path: "/store/host",
    summary: "the node that holds the store (uploads go to its API)",
    scope: "read",
    responses: { "200": jsonAnswer("its name and API base URL", StoreHostResponseSchema) },
  },
  {
    method: "put",
    path: "/store/uploads/{org}/{name}/files/{path}",
    summary:
      "store host: receive one file of a model (raw bytes, content-length required) into the upload area",
    scope: "admin",
    responses: {
      "201": jsonAnswer("the file received, with its sha256", UploadFileResponseSchema),
    },
  },
  {
    method: "post",
    path: "/store/uploads/{org}/{name}/commit",
    summary: "store host: move an upload into the store, where it registers like a copied model",
    scope: "admin",
    responses: { "200": jsonAnswer("the files moved", UploadCommitResponseSchema) },
  },
  {
    method: "delete",
    path: "/store/uploads/{org}/{name}",
    summary: "store host: drop an upload that will not be committed",
    scope: "admin",
    responses: { "200": jsonAnswer("dropped", UploadAbortResponseSchema) },
  },
];
