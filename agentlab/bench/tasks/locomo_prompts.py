"""LoCoMo's answer prompts, one per mode, and the refusal they all ask for (the judge's is :mod:`.locomo_judge`).

Each prompt's text is part of its calls' cache keys: change one only with a new ``*_VERSION``,
which the task stores with every case.
"""

from __future__ import annotations

#: The refusal every prompt asks for when the answer is absent; the official category-5 rule
#: accepts any answer containing "not mentioned", so this phrase scores there.
ADVERSARIAL_REFERENCE = "Not mentioned in the conversation."
FALLBACK_ANSWER = ADVERSARIAL_REFERENCE

LONG_CONTEXT_PROMPT_VERSION = "locomo-long-context-v1"
LONG_CONTEXT_PROMPT = """You answer questions about a long conversation between two people, using its full transcript.

# ABOUT THE TRANSCRIPT
The transcript below holds every session of the conversation, oldest first. Each session starts
with a SessionDate line that says when it took place; every other line is one message, written as
"Speaker: text".

# HOW TO ANSWER
1. Read the whole transcript and find every passage that bears on the question.
2. Use the SessionDate lines to work out when things happened.
3. Answer from direct evidence in the transcript whenever there is some.
4. When the transcript contradicts itself, trust the most recent information.
5. Resolve relative time expressions ("last year", "two weeks ago", "next month") against the
   date of the session in which they were said. For example, "I visited India last year" said in
   a session dated 4 May 2022 means the visit took place in 2021.
6. Always answer with absolute dates, months or years:
   - "last year" becomes "2022", never "last year"
   - "this month" becomes "July 2023", never "this month"
   - "next month" becomes "August 2023", never "next month"
   - "for seven years" becomes "since 2016" or "7 years"
   Never give a relative time expression as the answer.
7. Keep to the transcript: its people are not the public figures who may share their names.
8. Keep the answer short: five or six words at most.
9. If the transcript does not contain the answer, reply exactly "{fallback}"

# METHOD
1. Collect every part of the transcript related to the question.
2. Check the SessionDate and the content of each of those parts.
3. Look for explicit dates, times, places or events that answer the question.
4. If the answer needs a calculation, such as turning a relative time into a date, do it carefully.
5. Write a precise, concise answer that rests only on the transcript.
6. Check that the answer addresses exactly what was asked.
7. Check that every time in the answer is absolute, never "last year" or "this month".

# TRANSCRIPT:

{transcript}

Question: {question}
Answer:"""

SESSION_RECALL_PROMPT_VERSION = "locomo-session-recall-v1"
SESSION_RECALL_INSTRUCTION = """You answer one question about earlier conversations between two people. Messages from
those conversations that look related are listed below under "Related Session Recall"; each one
starts with the date of its session, as [SessionDate: ...].

How to answer:
- Read every recalled message before answering, and reuse their exact words where you can.
- Turn relative times ("yesterday", "last week", "next month") into absolute dates using the
  SessionDate of the message that contains them.
- Reply with the answer only: one to eight words, no sentence, no explanation.
- If any recalled message is about the topic of the question, answer from it. Reply
  "{fallback}" only when no recalled message relates to the question.

By kind of question:
- Facts (who, what, where, when, how many): copy the key phrase of the message that states it.
- Hypothetical or inference questions (would, could, is it likely, what might): reason from the
  evidence and commit to an answer such as "Yes" or "Likely no"; never fall back for these.
- Time calculations (how long, which came first): combine the dates of several messages.
- Open questions (what does someone think, feel, enjoy, value): copy the most relevant phrase.
- Indirect questions: combine the messages with common knowledge (a trip to Indianapolis means
  the state is Indiana; Xenoblade Chronicles means a Nintendo Switch).
- Names: when the question is about one person but every message about that exact activity
  concerns a different person, reply "{fallback}"; otherwise answer.

Format:
- Dates like "7 May 2023" or "June 2023", never "2023-05-07".
- Numbers as digits: "3", not "three".
- Do not start with a name or a pronoun: "Running, painting", not "She runs and paints"."""

#: The instruction of a generic arm (agentlab.policies.arms): the conversation is the history, the question the turn.
ARM_INSTRUCTION = """You answer one question about the conversation between two people shown above (each message
starts with its session date and speaker). Answer briefly, with the facts as stated in the conversation. If the
conversation does not contain the answer, answer exactly: {fallback}"""

MEMORY_QA_PROMPT_VERSION = "locomo-memory-qa-v1"
MEMORY_QA_INSTRUCTION = """You answer one question about earlier conversations between two people, using the long-term
memories stored about them.

Workflow:
1. Call memory_search once with a short keyword query taken from the question (for example
   "Melanie beach", not a full sentence).
2. Read every returned memory; use its exact words and, for "when" questions, its event_time.
3. Reply with the answer only: one to eight words, no sentence, no explanation.

If any returned memory relates to the question, answer from it; reply "{fallback}" only when none
does. Inference questions (would, could, is it likely) need a committed answer such as "Yes" or
"Likely no". Dates like "7 May 2023", numbers as digits, and no leading name or pronoun."""

MEMORY_PRELOAD_INSTRUCTION = """You answer one question about earlier conversations between two people, using the long-term
memories about them listed in this message. Use their exact words and, for "when" questions,
their dates. Reply with the answer only: one to eight words, no sentence, no explanation. Reply
"{fallback}" only when no memory relates to the question. Dates like "7 May 2023", numbers as
digits, and no leading name or pronoun."""
