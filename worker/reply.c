/*
 * a2_worker_reply: what a handler returns for its head (returned events,
 * or the error of a failed attempt), filled by a2_worker_reply_add and
 * a2_worker_reply_error, read and freed by the runner.
 */
#include "a2/worker.h"

#include "worker_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void a2__worker_reply_free(a2_worker_reply *rp)
{
    for (size_t i = 0; i < rp->nevents * 3; i++)
        free(rp->owned[i]);
    free(rp->events);
    free(rp->owned);
    free(rp->error);
    memset(rp, 0, sizeof *rp);
}

int a2_worker_reply_add(a2_worker_reply *reply, const char *type,
                        const char *payload, const char *id)
{
    if (!reply || !type || !*type || (id && !*id))
        return A2_WORKER_EINVAL;
    if (payload) {
        json_t *v = json_loads(payload, JSON_DECODE_ANY, NULL);
        if (!v)
            return A2_WORKER_EINVAL;
        json_decref(v);
    }
    if (reply->nevents >= A2_STORE_MAX_EVENTS)
        return A2_WORKER_EINVAL;
    if (reply->nevents == reply->cap) {
        size_t cap = reply->cap ? reply->cap * 2 : 8;
        a2_append_event *ev = realloc(reply->events, cap * sizeof *ev);
        if (!ev)
            return A2_WORKER_ENOMEM;
        reply->events = ev;
        char **ow = realloc(reply->owned, cap * 3 * sizeof *ow);
        if (!ow)
            return A2_WORKER_ENOMEM;
        reply->owned = ow;
        reply->cap = cap;
    }
    char genid[A2_STORE_MAX_NAME];
    if (!id) {
        const a2_head *h = reply->head;
        snprintf(genid, sizeof genid, "ret-%s-%lld-%zu",
                 h && h->dispatch.consumer ? h->dispatch.consumer : "?",
                 h ? (long long)h->event.index : 0LL, reply->nevents + 1);
        id = genid;
    }
    char **o = &reply->owned[reply->nevents * 3];
    o[0] = strdup(type);
    o[1] = payload ? strdup(payload) : NULL;
    o[2] = strdup(id);
    if (!o[0] || (payload && !o[1]) || !o[2]) {
        free(o[0]);
        free(o[1]);
        free(o[2]);
        return A2_WORKER_ENOMEM;
    }
    a2_append_event *e = &reply->events[reply->nevents];
    memset(e, 0, sizeof *e);
    e->type = o[0];
    e->payload = o[1];
    e->id = o[2];
    reply->nevents++;
    return 0;
}

void a2_worker_reply_error(a2_worker_reply *reply, const char *text)
{
    if (!reply)
        return;
    free(reply->error);
    reply->error = NULL;
    if (!text)
        return;
    size_t n = strlen(text);
    if (n > A2_WORKER_MAX_ERROR_TEXT)
        text += n - A2_WORKER_MAX_ERROR_TEXT;
    reply->error = strdup(text);
}

