"""The pure domain: what a job, a roster entry and an outcome are, and every decision about them.

Nothing here does I/O or imports the driver (``pymongo``); ``bson`` is used only
for its value types (``ObjectId``) and to measure a document's encoded size. Every
function takes ``now`` and the documents it decides on as arguments.
"""
