"""OpenAPI descriptions of the error answers the v1 routes share."""

NOT_FOUND = {404: {"description": "No such episode"}}
ENDED = {409: {"description": "The episode has ended (body: detail, status)"}}
ELSEWHERE = {421: {"description": "Another gateway runs this episode (body: detail, owner, owner_url)"}}
AUTH = {401: {"description": "Missing or invalid token, or one that does not open this endpoint"}}
