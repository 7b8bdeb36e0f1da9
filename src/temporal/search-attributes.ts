/** Custom search attributes the task workflows set, so ops can filter tasks in the Temporal UI. */
export const SEARCH_ATTRIBUTES = {
  TaskType: 'Keyword',
  AccountId: 'Keyword',
  TaskStatus: 'Keyword',
} as const;
